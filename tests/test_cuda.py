"""CUDA without a GPU: design spaces, traces and features of GPU programs, GPU platform ids, and the one-line
errors for what a CUDA target misses here (MetaSchedule generates CUDA design spaces with no device)."""

from __future__ import annotations

import pytest

from conftest import tlp_cli

# sm_90 (an H100/H200) with the limits MetaSchedule's GPU rules read; no device is asked for any of them.
CUDA = {"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
        "thread_warp_size": 32}
MATMUL, CONV2D = "dense_64x64x64", "conv2d_nchw_1x64x56x56_o64_k3_s1_p1_d1"


@pytest.fixture(scope="module")
def cuda_target():
    from tlp.platform import parse_target

    return parse_target(CUDA)


@pytest.fixture(scope="module")
def cuda_traces(cuda_target):
    """Sampled (post-processed) candidates of a matmul and a conv2d on CUDA: task name -> their traces."""
    from tlp._tvm import trace_json
    from tlp.dataset.sampler import CandidateSampler
    from tlp.workloads import load_tasks

    traces = {}
    for task in load_tasks([MATMUL, CONV2D], cuda_target):
        sampler = CandidateSampler(task, cuda_target)  # registers the CUDA tensor intrinsics (TuneContext needs them)
        assert sampler.design_spaces, task.name
        traces[task.name] = [trace_json(c.sch.trace, False) for c in sampler.random(6, seed=1)]
    return traces


def _attr_strings(traces, kind):
    return {a for trace in traces for inst in trace[0] if inst[0] == kind for a in inst[2] if isinstance(a, str)}


def test_cuda_design_spaces_hold_the_gpu_primitives(cuda_traces):
    for name, traces in cuda_traces.items():
        assert traces, name
        kinds = {inst[0] for trace in traces for inst in trace[0]}
        assert {"Bind", "CacheRead", "CacheWrite", "SamplePerfectTile", "EnterPostproc"} <= kinds, name
        assert {"blockIdx.x", "threadIdx.x", "vthread.x"} <= _attr_strings(traces, "Bind"), name
        assert "shared" in _attr_strings(traces, "CacheRead"), name
        assert "local" in _attr_strings(traces, "CacheWrite"), name
        annotations = _attr_strings(traces, "Annotate")
        assert {"meta_schedule.cooperative_fetch", "meta_schedule.unroll_explicit"} <= annotations, name


def test_gpu_features_carry_thread_axes_and_storage_scopes(cuda_traces):
    """Thread axes and storage scopes reach the string vocabulary and the string columns of their rows; the
    layout is the CPU one ([N, seq_len, 1 + S + R + P + 1]), and fp32 CUDA traces fit the default crop."""
    import numpy as np

    from tlp.features.featurizer import FeatureConfig, TraceFeaturizer
    from tlp.features.vocab import OOV

    traces = [t for group in cuda_traces.values() for t in group]
    featurizer = TraceFeaturizer(FeatureConfig()).fit(traces)
    for token in ("blockIdx.x", "threadIdx.x", "vthread.x", "shared", "local", "meta_schedule.cooperative_fetch"):
        assert featurizer.strings.id(token) != featurizer.strings.id("no-such-token"), token
    features = featurizer.transform(traces)
    cfg = featurizer.config
    assert features.shape == (len(traces), cfg.seq_len, cfg.width) and features.dtype == np.float32
    strings = cfg.columns()["strings"]
    first = traces[0][0]
    for row, inst in enumerate(first[: cfg.seq_len]):
        if inst[0] == "Bind":
            assert featurizer.strings.id(inst[2][0]) in features[0, row, strings]
        if inst[0] == "CacheRead":
            assert featurizer.strings.id("shared") in features[0, row, strings]
    assert OOV not in {featurizer.kinds.id(inst[0]) for trace in traces for inst in trace[0]}
    # fp32 CUDA candidates take 55-72 rows (benchmarks/gpu_platform/README.md): the default crop keeps them whole.
    assert max(featurizer.row_span(t)[0] for t in traces) <= cfg.seq_len


def test_tensor_core_sketches_featurize(cuda_target):
    """A float16 matmul gets MetaSchedule's tensor-core (WMMA) sketches: their scopes and intrinsics are strings."""
    from tvm import te, topi

    from tlp._tvm import structural_hash, trace_json, tvm
    from tlp.dataset.sampler import CandidateSampler
    from tlp.features.featurizer import FeatureConfig, TraceFeaturizer
    from tlp.workloads.task import Task

    a = te.placeholder((128, 128), "float16", name="A")
    b = te.placeholder((128, 128), "float16", name="B")
    mod = tvm.IRModule({"main": te.create_prim_func([a, b, topi.nn.dense(a, b, out_dtype="float32")])})
    task = Task(name="dense_fp16_128", mod=mod, weight=1, network="op:dense")
    assert task.key == str(structural_hash(mod))
    traces = [trace_json(c.sch.trace, False) for c in CandidateSampler(task, cuda_target).random(2, seed=0)]
    assert traces
    kinds = {inst[0] for trace in traces for inst in trace[0]}
    assert {"Tensorize", "Blockize", "Bind"} <= kinds
    scopes = _attr_strings(traces, "CacheRead") | _attr_strings(traces, "CacheWrite")
    assert {"wmma.matrix_a", "wmma.matrix_b", "wmma.accumulator"} <= scopes | _attr_strings(traces, "CacheWrite")
    featurizer = TraceFeaturizer(FeatureConfig(seq_len=160)).fit(traces, min_string_count=1)
    assert featurizer.strings.id("wmma.accumulator") != featurizer.strings.id("no-such-token")
    assert featurizer.transform(traces).shape == (len(traces), 160, featurizer.config.width)


def test_gpu_platform_id_names_the_gpu(cuda_target):
    from tlp.platform import Platform, nearest_platform

    h200 = Platform.gpu(cuda_target, "NVIDIA H200", "9.0", 143771)
    assert h200.id.startswith("cuda-sm_90-h200-") and "-on-" not in h200.id
    # nvidia-smi's MiB and TVM's byte count round to the same GiB: one GPU, one id, whichever source read it
    assert Platform.gpu(cuda_target, "NVIDIA  H200 ", "9.0", 143771.4).id == h200.id
    assert Platform.gpu(cuda_target, "NVIDIA H100 80GB HBM3", "9.0", 81559).id.startswith("cuda-sm_90-h100_80gb_hbm3-")
    assert Platform.gpu(cuda_target, "NVIDIA H100 80GB HBM3", "9.0", 81559).id != h200.id
    assert Platform.from_json(h200.to_json()).id == h200.id
    cpu = Platform({"kind": "llvm", "mcpu": "znver4", "num-cores": 2}, {"cpu_model": "AMD EPYC", "llvm_cpu": "znver4"})
    h100 = Platform.gpu(cuda_target, "NVIDIA H100", "9.0", 81559)
    known = {cpu.id: cpu.to_json(), h100.id: h100.to_json()}
    assert nearest_platform(h200, known) == (h100.id, False)  # a GPU head stands in for a GPU, not a CPU head


def test_gpu_slug():
    from tlp.gpu import gpu_slug

    assert gpu_slug("NVIDIA H200") == "h200"
    assert gpu_slug("NVIDIA GeForce RTX 4090") == "geforce_rtx_4090"
    assert gpu_slug("NVIDIA A100-SXM4-80GB") == "a100-sxm4-80gb"
    assert gpu_slug("Tesla T4") == "t4"


def _unset(monkeypatch, *names):
    """Unset ``names`` for one test, restored afterwards (``delenv`` alone forgets a variable that was unset, and
    what the code under test then sets would outlive the test)."""
    for name in names:
        monkeypatch.setenv(name, "-")
        monkeypatch.delenv(name)


def test_missing_compiler_and_wrong_arch_are_one_line_errors(monkeypatch, cuda_target):
    from tlp import gpu
    from tlp.platform import Platform

    h200 = gpu.gpu_hardware("NVIDIA H200", "9.0", 143771)
    _unset(monkeypatch, "TVM_CUDA_COMPILE_MODE", "CUDA_PATH")
    monkeypatch.setattr(gpu, "find_nvcc", lambda: None)
    monkeypatch.setattr(gpu, "_has_nvrtc", lambda: False)
    with pytest.raises(gpu.GPUError, match="nvcc is not on PATH") as error:
        gpu.check_gpu_target(cuda_target, h200)
    assert "\n" not in str(error.value) and "CUDA_HOME" in str(error.value)
    with pytest.raises(gpu.GPUError, match=r"sm_90.*A100.*8\.0.*sm_80"):
        gpu.check_gpu_target(cuda_target, gpu.gpu_hardware("NVIDIA A100-SXM4-80GB", "8.0", 81920))
    monkeypatch.setattr(gpu, "_has_nvrtc", lambda: True)  # NVRTC (cuda-bindings) stands in for nvcc
    assert gpu.cuda_compiler() == ("nvrtc", None)
    monkeypatch.setattr(gpu, "detect_gpu", lambda index=0: h200)
    with pytest.raises(gpu.GPUError, match="CUDA runtime is not loaded"):
        Platform.host(cuda_target)  # no driver here: TVM's CUDA runtime could not load
    monkeypatch.setattr(gpu, "cuda_runtime_problem", lambda: None)
    assert Platform.host(cuda_target).id == Platform.gpu(cuda_target, "NVIDIA H200", "9.0", 143771).id


def test_nvcc_found_under_cuda_home(monkeypatch, tmp_path):
    from tlp import gpu

    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    _unset(monkeypatch, "CUDA_PATH", "TVM_CUDA_COMPILE_MODE")
    assert gpu.find_nvcc() == str(nvcc)
    assert gpu.use_cuda_compiler() == "nvcc"
    import os

    assert os.environ["PATH"].split(os.pathsep)[0] == str(nvcc.parent)
    assert os.environ["TVM_CUDA_COMPILE_MODE"] == "nvcc" and os.environ["CUDA_PATH"] == str(tmp_path)


def _no_gpu_here():
    from tlp.gpu import detect_gpu

    return detect_gpu() is None


@pytest.mark.parametrize("verb", [["collect", "--workloads", MATMUL, "--max-batches", "1"], ["tune", MATMUL]])
def test_cuda_target_without_gpu_is_one_line_exit_2(verb, tmp_path):
    import json

    if not _no_gpu_here():
        pytest.skip("this machine has a GPU")
    place = ["--dataset", str(tmp_path / "ds")] if verb[0] == "collect" else ["--work-dir", str(tmp_path / "w")]
    result = tlp_cli([*verb, *place, "--target", json.dumps(CUDA)])
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "GPU" in lines[0] and "--rpc-tracker" in lines[0]
    assert not (tmp_path / "ds").exists() or not any((tmp_path / "ds").rglob("*.json*"))


def test_cuda_programs_build_without_a_gpu(cuda_target):
    """Our builder compiles CUDA candidates with nvcc, in workers that import no tensor intrinsics (where nvcc is
    installed; running them needs the GPU)."""
    from tlp._tvm import ms
    from tlp.dataset.measure import MeasureConfig, Measurer, _remove_artifacts
    from tlp.dataset.sampler import CandidateSampler
    from tlp.gpu import find_nvcc
    from tlp.workloads import load_tasks

    if find_nvcc() is None:
        pytest.skip("no nvcc here")
    task = load_tasks([MATMUL], cuda_target)[0]
    candidates = CandidateSampler(task, cuda_target).random(2, seed=2)
    measurer = Measurer(cuda_target, MeasureConfig(build_workers=2))
    try:
        built = measurer.builder.build([ms.builder.BuilderInput(c.sch.mod, measurer.target) for c in candidates])
    finally:
        measurer.close()
    assert [b.error_msg for b in built] == [None] * len(candidates)
    _remove_artifacts(built)
