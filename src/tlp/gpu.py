"""CUDA platforms: which GPU measures, which compiler builds, and what is missing when either is.

A GPU platform is named after its GPU, not after the host CPU (a kernel's time depends on the card, hardly on the
CPU that launched it): ``cuda-sm_90-h200-<hash>``, the hash over the target and :func:`gpu_hardware` (GPU name,
compute capability, memory rounded to GiB: what ``nvidia-smi`` and TVM's device API both report, so either source
gives the same id). The driver version is left out, as a CPU platform leaves out the kernel version.

Building CUDA programs needs a CUDA compiler in every builder worker: ``nvcc`` (PATH, ``$CUDA_HOME``,
``$CUDA_PATH``, ``/usr/local/cuda``) or NVRTC through the ``cuda-bindings`` package; :func:`use_cuda_compiler`
chooses one before the workers start (TVM reads ``TVM_CUDA_COMPILE_MODE`` in each of them).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from typing import Any

from tlp import TLPError

GPU_KINDS = frozenset({"cuda"})


class GPUError(TLPError, RuntimeError):
    """No usable GPU or CUDA compiler for a CUDA target: one line naming what is missing and what to do."""


def is_gpu_target(target: Any) -> bool:
    """Whether ``target`` (a JSON dict, a TVM Target or a kind name) compiles for a GPU TLP measures."""
    return target_kind(target) in GPU_KINDS


def target_kind(target: Any) -> str:
    if isinstance(target, str):
        return target
    if isinstance(target, dict):
        return str(target.get("kind", ""))
    kind = getattr(target, "kind", None)
    return str(getattr(kind, "name", kind or ""))


def gpu_hardware(name: str, compute_capability: str | None = None, memory_mib: float | None = None
                 ) -> dict[str, Any]:
    """The fingerprint of one GPU, from its description (no device needed): ``{"gpu_name", "compute_capability",
    "memory_gib"}``; the platform id is derived from it."""
    hardware: dict[str, Any] = {"gpu_name": " ".join(str(name).split())}
    if compute_capability:
        hardware["compute_capability"] = str(compute_capability)
    if memory_mib:
        hardware["memory_gib"] = int(round(float(memory_mib) / 1024))
    return hardware


def gpu_slug(name: str) -> str:
    """A GPU's name as a platform-id part: ``NVIDIA H200`` -> ``h200``, ``NVIDIA GeForce RTX 4090`` ->
    ``geforce_rtx_4090``, ``NVIDIA A100-SXM4-80GB`` -> ``a100-sxm4-80gb``."""
    words = [w for w in re.split(r"\s+", name.strip().lower()) if w and w not in ("nvidia", "tesla")]
    return re.sub(r"[^a-z0-9.-]+", "_", "_".join(words)).strip("_") or "gpu"


def _nvidia_smi() -> list[dict[str, Any]] | None:
    """The GPUs ``nvidia-smi`` lists (None: no nvidia-smi, or it failed: no driver)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=name,compute_cap,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    gpus = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0]:
            memory = float(parts[2]) if re.fullmatch(r"[0-9.]+", parts[2]) else None
            capability = parts[1] if re.fullmatch(r"[0-9]+\.[0-9]+", parts[1]) else None
            gpus.append(gpu_hardware(parts[0], capability, memory))
    return gpus


def _tvm_device() -> dict[str, Any] | None:
    """GPU 0 through TVM's CUDA device API (None: TVM sees no CUDA device)."""
    from tlp._tvm import tvm  # pylint: disable=import-outside-toplevel

    try:
        device = tvm.cuda(0)
        if not device.exist:
            return None
        return gpu_hardware(str(device.device_name), str(device.compute_version),
                            int(device.total_global_memory) / 2**20)
    except Exception:  # pylint: disable=broad-except  # a runtime without CUDA, a broken driver: no device
        return None


def detect_gpu(index: int = 0) -> dict[str, Any] | None:
    """This machine's GPU ``index`` (``CUDA_VISIBLE_DEVICES`` is not applied: nvidia-smi lists every card), from
    nvidia-smi, else TVM's device API; None without one."""
    gpus = _nvidia_smi()
    if gpus:
        return gpus[min(index, len(gpus) - 1)]
    return _tvm_device()


# ---- the CUDA compiler --------------------------------------------------------------------------------------
def find_nvcc() -> str | None:
    """``nvcc``: on PATH, else under ``$CUDA_HOME``, ``$CUDA_PATH`` or ``/usr/local/cuda``."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.access(os.path.join(root, "bin", "nvcc"), os.X_OK):
            return os.path.join(root, "bin", "nvcc")
    return None


def _has_nvrtc() -> bool:
    try:
        return importlib.util.find_spec("cuda.bindings.nvrtc") is not None
    except (ImportError, ValueError):
        return False


def cuda_compiler() -> tuple[str, str | None]:
    """Which CUDA compiler TVM's build will use here: ``("nvcc", path)``, ``("nvrtc", None)``, or raises
    :class:`GPUError`. ``TVM_CUDA_COMPILE_MODE`` set by the user is kept."""
    asked = os.environ.get("TVM_CUDA_COMPILE_MODE", "").strip().lower()
    nvcc = find_nvcc()
    if asked == "nvrtc" or (not asked and nvcc is None):
        if _has_nvrtc():
            return "nvrtc", None
        if asked == "nvrtc":
            raise GPUError("TVM_CUDA_COMPILE_MODE=nvrtc, but the cuda-bindings package (NVRTC) is not installed: "
                           "pip install cuda-bindings, or unset it to use nvcc")
    if nvcc is None:
        raise GPUError("a CUDA target needs CUDA's compiler, and there is none here: nvcc is not on PATH nor in "
                       "$CUDA_HOME/bin, $CUDA_PATH/bin or /usr/local/cuda/bin, and the cuda-bindings package (NVRTC) "
                       "is not installed: install the CUDA toolkit (or set CUDA_HOME to it)")
    return "nvcc", nvcc


def use_cuda_compiler() -> str:
    """Choose the CUDA compiler for this process and the build workers it starts (they inherit the environment):
    puts nvcc's folder on PATH where it was found elsewhere and sets ``TVM_CUDA_COMPILE_MODE``; returns which."""
    mode, nvcc = cuda_compiler()
    if nvcc is not None:
        folder = os.path.dirname(nvcc)
        if shutil.which("nvcc") is None:
            os.environ["PATH"] = folder + os.pathsep + os.environ.get("PATH", "")
        os.environ.setdefault("CUDA_PATH", os.path.dirname(folder))  # TVM's find_cuda_path (libdevice, headers)
    os.environ["TVM_CUDA_COMPILE_MODE"] = mode
    return mode


def cuda_runtime_problem() -> str | None:
    """Why TVM's CUDA runtime is not loaded in this process (None: it is). TVM loads ``libtvm_runtime_cuda.so``
    at import and ignores a failure (a missing ``libcudart.so.13`` or ``libcuda.so.1``), after which every run on
    the GPU fails; this says which library was missing."""
    import tvm_ffi  # pylint: disable=import-outside-toplevel

    from tlp._tvm import tvm  # pylint: disable=import-outside-toplevel

    if tvm_ffi.get_global_func("device_api.cuda", allow_missing=True) is not None:
        return None
    import ctypes  # pylint: disable=import-outside-toplevel

    library = os.path.join(os.path.dirname(tvm.base._LOADED_LIBS["tvm_runtime"]._name), "libtvm_runtime_cuda.so")
    try:
        ctypes.CDLL(library)
    except OSError as error:
        return str(error).splitlines()[0] if str(error) else "libtvm_runtime_cuda.so did not load"
    return "this TVM has no CUDA runtime (libtvm_runtime_cuda.so) or it did not register"


def _arch_capability(arch: str) -> str | None:
    match = re.fullmatch(r"sm_(\d+?)(\d)a?", str(arch))
    return f"{match.group(1)}.{match.group(2)}" if match else None


def check_gpu_target(target: dict[str, Any], gpu: dict[str, Any] | None = None) -> dict[str, Any]:
    """This machine's GPU for a CUDA ``target``, after checking that its programs can be built and run here;
    raises :class:`GPUError` (one line: what is missing, what to do) otherwise. ``gpu``: a given description
    instead of detecting one."""
    gpu = gpu or detect_gpu()
    if gpu is None:
        raise GPUError(f"target kind {target.get('kind')!r} needs an NVIDIA GPU and its driver on this machine, and "
                       "none is visible (no nvidia-smi, and TVM's CUDA device API sees no device): run on a machine "
                       "with a GPU, or measure on one through --rpc-tracker")
    wanted = _arch_capability(str(target.get("arch", "")))
    have = gpu.get("compute_capability")
    if wanted and have and wanted != have:
        raise GPUError(f"target arch {target['arch']!r} (compute capability {wanted}) but this GPU "
                       f"({gpu['gpu_name']}) is {have}: use \"arch\": \"sm_{have.replace('.', '')}\"")
    use_cuda_compiler()  # this process compiles too (tlp tune's compile check, the final network)
    problem = cuda_runtime_problem()
    if problem is not None:
        raise GPUError(f"TVM's CUDA runtime is not loaded ({problem}): put the CUDA runtime TVM was built with "
                       "(libcudart.so.13) and the driver's libcuda.so.1 on LD_LIBRARY_PATH, e.g. /usr/local/cuda/lib64")
    return gpu
