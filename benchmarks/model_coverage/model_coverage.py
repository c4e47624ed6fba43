"""Which third-party models TLP can tune: import -> tune -> compile -> numerics -> latency vs PyTorch, per model.

Every model is a ``transformers`` definition at a small size with random weights (no hub download), built as a
user would build it, and goes through what ``tlp tune MODEL.py --trials 16 --top-tasks 2`` does: ``torch.export``
and Relax import (stage ``import``), the compile check with default schedules, a small search with the shipped TLP
model (``tune``), compilation with the tuned schedules, the comparison with PyTorch eager (``numerics``) and the
end-to-end latency against PyTorch eager on the same threads.

Results go to ``benchmarks/model_coverage/results/model_coverage.json``, one entry per model, written after each
model: a re-run skips the models already there (``--redo NAME`` runs one again; ``--retry-failed`` the failed ones).
The table in this study's README is printed by ``--table``. The module imports nothing heavy at the top: the test
suite imports it for ``MODELS`` (with ``benchmarks/model_coverage`` on the path).

    pip install -e '.[hf]'
    .venv/bin/python benchmarks/model_coverage/model_coverage.py            # all models (about 20 min on 2 cores)
    .venv/bin/python benchmarks/model_coverage/model_coverage.py --only gpt2,llama
    .venv/bin/python benchmarks/model_coverage/model_coverage.py --table    # the markdown table of the stored results
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform as python_platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

RESULTS = Path(__file__).resolve().parent / "results" / "model_coverage.json"
TRIALS, TOP_TASKS, TRIALS_PER_ITER, POPULATION = 16, 2, 8, 256
SEQ = 32  # tokens per example input (prefill at this fixed shape)


# ---- the models: small configs, random weights --------------------------------------------------------------
def _ids(vocab: int, length: int = SEQ) -> Any:
    import torch

    return torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(0))


def _image(size: int = 64, channels: int = 3) -> Any:
    import torch

    return torch.randn(1, channels, size, size, generator=torch.Generator().manual_seed(0))


def bert() -> tuple[Any, tuple[Any, ...]]:
    from transformers import BertConfig, BertModel

    return BertModel(BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                vocab_size=1000, max_position_embeddings=128)), (_ids(1000),)


def gpt2() -> tuple[Any, tuple[Any, ...]]:
    from transformers import GPT2Config, GPT2Model

    return GPT2Model(GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=128, vocab_size=1000, bos_token_id=0,
                                eos_token_id=0)), (_ids(1000),)


def llama() -> tuple[Any, tuple[Any, ...]]:
    from transformers import LlamaConfig, LlamaModel

    # num_key_value_heads < num_attention_heads: grouped-query attention
    return LlamaModel(LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                  num_key_value_heads=2, vocab_size=1000, max_position_embeddings=128)), (_ids(1000),)


def qwen2() -> tuple[Any, tuple[Any, ...]]:
    from transformers import Qwen2Config, Qwen2Model

    return Qwen2Model(Qwen2Config(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                  num_key_value_heads=1, vocab_size=1000, max_position_embeddings=128)), (_ids(1000),)


def mistral() -> tuple[Any, tuple[Any, ...]]:
    from transformers import MistralConfig, MistralModel

    # sliding_window smaller than the sequence: the windowed causal mask is exercised
    return MistralModel(MistralConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                                      max_position_embeddings=128, sliding_window=16)), (_ids(1000),)


def t5() -> tuple[Any, tuple[Any, ...]]:
    import torch
    from transformers import T5Config, T5Model

    class T5EncoderDecoder(torch.nn.Module):
        """T5Model needs ``decoder_input_ids`` by keyword; TLP passes example inputs positionally."""

        def __init__(self) -> None:
            super().__init__()
            self.model = T5Model(T5Config(d_model=64, d_ff=128, d_kv=16, num_layers=2, num_decoder_layers=2,
                                          num_heads=4, vocab_size=1000))

        def forward(self, input_ids: torch.Tensor, decoder_input_ids: torch.Tensor) -> Any:
            return self.model(input_ids=input_ids, decoder_input_ids=decoder_input_ids, use_cache=False)

    return T5EncoderDecoder(), (_ids(1000), _ids(1000, 8))


def bart() -> tuple[Any, tuple[Any, ...]]:
    from transformers import BartConfig, BartModel

    # decoder_input_ids default to the shifted input_ids
    return BartModel(BartConfig(d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                                decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                                vocab_size=1000, max_position_embeddings=128)), (_ids(1000),)


def whisper() -> tuple[Any, tuple[Any, ...]]:
    import torch
    from transformers import WhisperConfig, WhisperModel

    class WhisperEncoderDecoder(torch.nn.Module):
        """WhisperModel needs ``decoder_input_ids`` by keyword."""

        def __init__(self) -> None:
            super().__init__()
            self.model = WhisperModel(WhisperConfig(d_model=64, encoder_layers=1, decoder_layers=1,
                                                    encoder_attention_heads=4, decoder_attention_heads=4,
                                                    encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=80,
                                                    max_source_positions=50, max_target_positions=64,
                                                    vocab_size=1000, pad_token_id=0, bos_token_id=0,
                                                    eos_token_id=0, decoder_start_token_id=0))

        def forward(self, input_features: torch.Tensor, decoder_input_ids: torch.Tensor) -> Any:
            return self.model(input_features=input_features, decoder_input_ids=decoder_input_ids, use_cache=False)

    features = torch.randn(1, 80, 100, generator=torch.Generator().manual_seed(0))  # 2 x max_source_positions
    return WhisperEncoderDecoder(), (features, _ids(1000, 8))


def wav2vec2() -> tuple[Any, tuple[Any, ...]]:
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    config = Wav2Vec2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                            conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                            num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
    return Wav2Vec2Model(config), (torch.randn(1, 4000, generator=torch.Generator().manual_seed(0)),)


def vit() -> tuple[Any, tuple[Any, ...]]:
    from transformers import ViTConfig, ViTModel

    return ViTModel(ViTConfig(image_size=64, patch_size=8, hidden_size=64, num_hidden_layers=2,
                              num_attention_heads=4, intermediate_size=128)), (_image(),)


def swin() -> tuple[Any, tuple[Any, ...]]:
    from transformers import SwinConfig, SwinModel

    # shifted-window attention (window 4 on a 16 x 16 patch grid)
    return SwinModel(SwinConfig(image_size=64, patch_size=4, embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                                window_size=4)), (_image(),)


def resnet() -> tuple[Any, tuple[Any, ...]]:
    from transformers import ResNetConfig, ResNetModel

    return ResNetModel(ResNetConfig(embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1])), (
        _image(),)


def convnext() -> tuple[Any, tuple[Any, ...]]:
    from transformers import ConvNextConfig, ConvNextModel

    return ConvNextModel(ConvNextConfig(hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1])), (_image(),)


MODELS: dict[str, tuple[str, Callable[[], tuple[Any, tuple[Any, ...]]]]] = {
    # name: (what it covers, builder)
    "bert": ("BertModel: encoder", bert),
    "gpt2": ("GPT2Model: decoder, KV cache dropped", gpt2),
    "llama": ("LlamaModel: decoder, GQA 4/2 heads, RoPE", llama),
    "qwen2": ("Qwen2Model: decoder, GQA 4/1 heads", qwen2),
    "mistral": ("MistralModel: decoder, GQA, sliding window", mistral),
    "t5": ("T5Model: encoder-decoder, relative positions", t5),
    "bart": ("BartModel: encoder-decoder", bart),
    "whisper": ("WhisperModel: speech encoder-decoder", whisper),
    "wav2vec2": ("Wav2Vec2Model: speech, conv front end", wav2vec2),
    "vit": ("ViTModel: vision transformer", vit),
    "swin": ("SwinModel: windowed attention", swin),
    "resnet": ("ResNetModel: CNN", resnet),
    "convnext": ("ConvNextModel: CNN, depthwise + LayerNorm", convnext),
}


# ---- one model through every stage ---------------------------------------------------------------------------
def run_model(name: str, target: dict[str, Any], work_root: Path) -> dict[str, Any]:
    """One model through import -> tune -> compile -> numerics -> latency; a failure is one line with its stage."""
    import torch

    from tlp import StageError, TLPError, one_line
    from tlp.tune import TuneConfig, tune
    from tlp.tune.sources import from_torch

    covers, build = MODELS[name]
    entry: dict[str, Any] = {"model": name, "covers": covers, "stages": {}}
    started = time.monotonic()
    busy_before = _busy_seconds()
    stage = "build"
    try:
        torch.manual_seed(0)
        module, inputs = build()
        entry["parameters"] = sum(p.numel() for p in module.parameters())
        stage = "import"
        begin = time.monotonic()
        tunable = from_torch(name, module, inputs, target)
        entry["stages"]["import_s"] = round(time.monotonic() - begin, 1)
        entry["tasks"] = len(tunable.tasks)
        entry["import_notes"] = tunable.notes
        stage = "tune"
        begin = time.monotonic()
        config = TuneConfig(trials=TRIALS, trials_per_iter=TRIALS_PER_ITER, population=POPULATION)
        with contextlib.redirect_stdout(sys.stderr):
            report = tune(tunable.top_tasks(TOP_TASKS), target, work_root / name, config)
        entry["stages"]["tune_compile_s"] = round(time.monotonic() - begin, 1)
        entry.update({k: report.get(k) for k in ("trials", "tasks_latency_s", "end_to_end_s", "torch_eager_s",
                                                  "speedup_vs_torch", "threads", "numerics")})
        entry["status"] = "ok" if report.get("numerics", {}).get("ok") else "numerics failed"
        if entry["status"] != "ok":
            entry["stage"] = "numerics"
    except StageError as error:
        entry.update(status="failed", stage=error.stage, error=str(error))
    except (TLPError, Exception) as error:  # pylint: disable=broad-except  # every failure becomes one table line
        entry.update(status="failed", stage=stage, error=f"{name}: {stage} failed: {one_line(error)}")
    entry["wall_s"] = round(time.monotonic() - started, 1)
    entry["foreign_busy_cores"] = round(_foreign_busy_cores(busy_before, entry["wall_s"]), 2)
    return entry


def _busy_seconds() -> tuple[float, float]:
    """(CPU seconds busy on the whole machine, CPU seconds of this process and its children) so far."""
    import psutil

    machine = psutil.cpu_times()
    own = psutil.Process().cpu_times()
    busy = sum(machine) - machine.idle - getattr(machine, "iowait", 0.0)
    return busy, own.user + own.system + own.children_user + own.children_system


def _foreign_busy_cores(before: tuple[float, float], wall_s: float) -> float:
    """Cores kept busy by other processes while this model ran, on average: latencies (ours and PyTorch's, both
    multi-threaded) are unreliable when this is not near 0."""
    busy, own = _busy_seconds()
    return max(0.0, (busy - before[0]) - (own - before[1])) / max(wall_s, 1e-9)


def environment() -> dict[str, Any]:
    import torch
    import transformers

    import tvm
    from tlp.platform import host_fingerprint

    return {"date": datetime.date.today().isoformat(), "machine": host_fingerprint(),
            "python": python_platform.python_version(), "tvm": tvm.__version__, "torch": torch.__version__,
            "transformers": transformers.__version__,
            "budget": {"trials": TRIALS, "top_tasks": TOP_TASKS, "trials_per_iter": TRIALS_PER_ITER,
                       "population": POPULATION, "cost_model": "tlp (shipped)"}}


def load_results(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {"environment": {}, "models": {}}


def save_results(path: Path, results: dict[str, Any]) -> None:
    """Write-then-rename: a killed run leaves the previous file intact."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as tmp:
        json.dump(results, tmp, indent=1)
    os.replace(tmp.name, path)


# ---- the table -----------------------------------------------------------------------------------------------
def _ms(seconds: float | None) -> str:
    return f"{seconds * 1e3:.2f}" if seconds else "-"


def markdown_table(results: dict[str, Any]) -> str:
    rows = ["| model | covers | tasks | import | tune + compile | numerics (max rel err) | compiled ms | "
            "PyTorch ms | speed-up | other load |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name in MODELS:
        entry = results["models"].get(name)
        if entry is None:
            continue
        if entry["status"] == "failed":
            rows.append(f"| {name} | {entry['covers']} | {entry.get('tasks', '-')} | "
                        f"{'ok' if entry['stage'] not in ('build', 'import') else 'FAILED'} | "
                        f"FAILED at {entry['stage']}: `{entry['error']}` | | | | | |")
            continue
        numerics = entry.get("numerics") or {}
        worst = max((o["max_rel_err"] or 0.0 for o in numerics.get("outputs", [])), default=None)
        verdict = f"{'ok' if numerics.get('ok') else 'FAILED'} ({worst:.1e})" if worst is not None else "-"
        speedup = f"{entry['speedup_vs_torch']:.2f}x" if entry.get("speedup_vs_torch") else "-"
        rows.append(f"| {name} | {entry['covers']} | {entry['tasks']} | ok | ok | {verdict} | "
                    f"{_ms(entry.get('end_to_end_s'))} | {_ms(entry.get('torch_eager_s'))} | {speedup} | "
                    f"{entry.get('foreign_busy_cores', '-')} |")
    passed = sum(1 for e in results["models"].values() if e["status"] == "ok")
    rows.append(f"\n{passed} of {len(results['models'])} models pass every stage.")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--only", help="comma-separated model names (default: all)")
    parser.add_argument("--redo", help="comma-separated model names to run again")
    parser.add_argument("--retry-failed", action="store_true", help="run again the models that failed")
    parser.add_argument("--results", default=str(RESULTS))
    parser.add_argument("--work-dir", default="runs/model_coverage", help="tuning databases, one folder per model")
    parser.add_argument("--table", action="store_true", help="print the markdown table of the stored results")
    args = parser.parse_args(argv)
    path = Path(args.results)
    results = load_results(path)
    if args.table:
        print(markdown_table(results))
        return 0
    from tlp.platform import host_target

    wanted = args.only.split(",") if args.only else list(MODELS)
    unknown = [n for n in wanted if n not in MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    redo = set(args.redo.split(",")) if args.redo else set()
    target = host_target()
    results["environment"] = environment()
    for name in wanted:
        done = results["models"].get(name)
        if done and name not in redo and not (args.retry_failed and done["status"] != "ok"):
            print(f"{name}: done before ({done['status']}), skipped", flush=True)
            continue
        entry = run_model(name, target, Path(args.work_dir))
        results["models"][name] = entry
        save_results(path, results)
        print(f"{name}: {entry['status']}" + (f" — {entry['error']}" if entry.get("error") else "") +
              f" ({entry['wall_s']:.0f} s)", flush=True)
    print(markdown_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
