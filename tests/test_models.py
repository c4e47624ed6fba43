"""The models people bring: HuggingFace decoders import, compile and match PyTorch; failures are one clear line."""

import json
import textwrap

import numpy as np
import pytest

from conftest import tlp_cli
from tlp import StageError
from tlp._tvm import ms, tvm
from tlp.tune.compile_check import check_compiles
from tlp.tune.numerics import compare_outputs
from tlp.tune.report import compile_and_time
from tlp.tune.sources import Tunable, resolve

GPT2 = """
import torch
from transformers import GPT2Config, GPT2Model
torch.manual_seed(0)
model = GPT2Model(GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=64, vocab_size=128, bos_token_id=0,
                             eos_token_id=0))
example_inputs = (torch.randint(0, 128, (1, 16)),)
"""
LLAMA = """
import torch
from transformers import LlamaConfig, LlamaModel
torch.manual_seed(0)
# Grouped-query attention: fewer key/value heads than query heads.
model = LlamaModel(LlamaConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                               num_key_value_heads=2, vocab_size=128, max_position_embeddings=64))
example_inputs = (torch.randint(0, 128, (1, 16)),)
"""
UNSUPPORTED_OP = """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.erfinv(torch.tanh(x) * 0.5)
model = Model()
example_inputs = (torch.randn(2, 8),)
"""


def _source(tmp_path, name, text):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return str(path)


# GPT-2 goes the same way as Llama (KV cache, causal-mask rewrite): slow, to keep the default run short.
@pytest.mark.parametrize("name,text", [pytest.param("gpt2", GPT2, marks=pytest.mark.slow), ("llama", LLAMA)])
def test_hf_decoder_with_default_config_compiles_and_matches_pytorch(tmp_path, host_platform, name, text):
    pytest.importorskip("transformers")
    tunable = resolve(_source(tmp_path, name, text), host_platform.target)
    assert tunable.output_names == ["last_hidden_state"]
    assert any("KV cache past_key_values (DynamicCache)" in note for note in tunable.notes)
    assert any("rewritten" in note for note in tunable.notes)  # the causal mask's bool cumsum
    check_compiles(tunable, host_platform.target)
    result = compile_and_time(tunable, host_platform.target, tmp_path, ms.database.MemoryDatabase())
    numerics = result["numerics"]
    assert numerics["ok"], numerics
    (output,) = numerics["outputs"]
    assert output["shape"] == [1, 16, 32] and output["max_rel_err"] < 1e-4


def _bool_equal_network():
    """A network TVM 0.27 cannot compile: ``equal`` of two bool tensors, not rewritten."""
    from tvm import relax
    from tvm.script import relax as R

    builder = relax.BlockBuilder()
    a = relax.Var("a", R.Tensor((4,), "bool"))
    b = relax.Var("b", R.Tensor((4,), "bool"))
    with builder.function("main", [a, b]):
        with builder.dataflow():
            out = builder.emit_output(relax.op.equal(a, b))
        builder.emit_func_output(out)
    return Tunable("mask", [], relax_mod=builder.get(), inputs=[np.ones(4, bool), np.zeros(4, bool)])


def test_compile_check_names_the_model_stage_and_primfunc(host_platform):
    with pytest.raises(StageError) as caught:
        check_compiles(_bool_equal_network(), host_platform.target)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("mask: compile with default schedules (before tuning) failed: PrimFunc equal")
    assert "kDLFloat" in message or "fcmp" in message
    assert "try: " in message


def test_compile_failure_after_tuning_says_how_to_reuse_the_database(tmp_path, host_platform):
    with pytest.raises(StageError) as caught:
        compile_and_time(_bool_equal_network(), host_platform.target, tmp_path, ms.database.MemoryDatabase())
    message = str(caught.value)
    assert "compile with the tuned schedules failed" in message and "\n" not in message
    assert f"the tuned database in {tmp_path} is kept" in message and f"--work-dir {tmp_path}" in message


def test_a_compiled_model_that_differs_from_pytorch_fails_numerics(tmp_path, host_platform):
    import torch

    tunable = resolve(_source(tmp_path, "small", """
        import torch
        model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
        example_inputs = (torch.randn(2, 8),)
        """), host_platform.target)
    result = compile_and_time(tunable, host_platform.target, tmp_path, ms.database.MemoryDatabase())
    assert result["numerics"]["ok"] and result["numerics"]["outputs"][0]["max_abs_err"] < 1e-5
    with torch.no_grad():
        tunable.torch_module.inner[0].bias += 0.1  # PyTorch's model changes; the compiled one does not
    result = compile_and_time(tunable, host_platform.target, tmp_path, ms.database.MemoryDatabase())
    assert not result["numerics"]["ok"]
    assert result["numerics"]["outputs"][0]["max_abs_err"] == pytest.approx(0.1, abs=1e-5)


def test_numerics_tolerances_by_dtype():
    reference = [np.array([1.0, -2.0], np.float32), np.array([3, 4])]
    close = compare_outputs(["y", "i"], [reference[0] * (1 + 1e-5), reference[1]], reference)
    assert close["ok"] and close["outputs"][0]["max_rel_err"] == pytest.approx(1e-5, rel=1e-2)
    far = compare_outputs(["y", "i"], [reference[0] + 0.01, reference[1] + 1], reference)
    assert not far["ok"] and [o["ok"] for o in far["outputs"]] == [False, False]
    assert not compare_outputs(["y"], [np.array([np.nan, 0], np.float32)], reference[:1])["ok"]


def test_outputs_near_zero_are_judged_by_an_absolute_floor():
    # A model whose outputs are ~1e-40 (denormals) was reported NUMERICS FAILED with a max abs error of 9e-41.
    from tlp.tune.numerics import format_numerics

    tiny = np.array([1e-40, -2e-40, 0.0], np.float32)
    result = compare_outputs(["y"], [tiny + np.float32(9e-41)], [tiny])
    (output,) = result["outputs"]
    assert result["ok"] and output["near_zero"] and output["max_abs_err"] < 1e-39 and output["tolerance_abs"] == 1e-5
    assert "outputs all near zero" in "\n".join(format_numerics(result))
    # the floor is a floor: a real difference at that scale still fails, and large outputs stay relative
    assert not compare_outputs(["y"], [tiny + np.float32(1e-3)], [tiny])["ok"]
    big = np.array([1e4, -2e4], np.float32)
    assert compare_outputs(["y"], [big + 5.0], [big])["ok"] and not compare_outputs(["y"], [big + 50.0], [big])["ok"]
    assert "near_zero" not in compare_outputs(["y"], [big], [big])["outputs"][0]


def test_cli_failure_is_one_line_and_debug_adds_the_traceback(tmp_path):
    source = _source(tmp_path, "unsupported", UNSUPPORTED_OP)
    run = tlp_cli(["tune", source, "--trials", "4", "--work-dir", str(tmp_path / "w")])
    assert run.returncode == 2
    errors = [line for line in run.stderr.splitlines() if line.startswith("tlp: error:")]
    assert len(errors) == 1
    assert "unsupported: Relax import failed: " in errors[0] and "erfinv" in errors[0] and "; try: " in errors[0]
    assert "Traceback" not in run.stderr
    debug = tlp_cli(["tune", source, "--trials", "4", "--work-dir", str(tmp_path / "w"), "--debug"])
    assert debug.returncode == 2 and "Traceback" in debug.stderr


# 80 s (a whole Llama tuned through the CLI); the library path it rides on is checked by
# test_hf_decoder_with_default_config_compiles_and_matches_pytorch in the default run.
@pytest.mark.slow
def test_cli_tune_json_carries_the_numerics(tmp_path):
    pytest.importorskip("transformers")
    source = _source(tmp_path, "llama", LLAMA)
    run = tlp_cli(["tune", source, "--trials", "4", "--set", "trials_per_iter=4", "--set", "population=32",
                   "--top-tasks", "1", "--cost-model", "random", "--work-dir", str(tmp_path / "w"),
                   "--json"])
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert report["numerics"]["ok"] and report["numerics"]["outputs"][0]["name"] == "last_hidden_state"
    assert any("use_cache=False" in note for note in report["import_notes"])


def test_non_tensor_outputs_are_dropped_and_named():
    import torch

    from tlp.workloads.exportable import make_exportable

    class Mixed(torch.nn.Module):
        def forward(self, x):
            return {"hidden": x * 2, "extras": (x + 1, "label", None), "count": 3}

    x = torch.ones(2, 3)
    exportable = make_exportable(Mixed(), (x,))
    assert exportable.output_names == ["hidden", "extras[0]"]
    assert exportable.dropped == ["output extras[1] (str): not a tensor", "output count (int): not a tensor"]
    hidden, extra = exportable.module(x)
    assert torch.equal(hidden, x * 2) and torch.equal(extra, x + 1)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["t5", "whisper", "swin", "wav2vec2"])
def test_more_model_families_compile_and_match_pytorch(tmp_path, host_platform, name):
    """Encoder-decoder, speech and windowed-attention models of the coverage suite, without tuning."""
    import sys
    from pathlib import Path

    pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks" / "model_coverage"))
    import model_coverage  # pylint: disable=import-outside-toplevel

    from tlp.tune.sources import from_torch

    module, inputs = model_coverage.MODELS[name][1]()
    tunable = from_torch(name, module, inputs, host_platform.target)
    check_compiles(tunable, host_platform.target)
    numerics = compile_and_time(tunable, host_platform.target, tmp_path, ms.database.MemoryDatabase())["numerics"]
    assert numerics["ok"] and len(numerics["outputs"]) == 2, numerics
