"""Platforms: a compilation target plus the fingerprint of the hardware that measured it.

Latencies are only comparable within one platform, so every dataset is kept per platform and a platform's id is
derived from both the target and the hardware: the same ``mcpu`` on a different CPU model or core count is a
different platform, and data from it never mixes silently with ours.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

import psutil

from tlp import TLPError

# ISA flags that change what LLVM can emit or how fast it runs; the rest of /proc/cpuinfo's flags is noise.
_RELEVANT_FLAGS = re.compile(r"^(sse4_2|avx|avx2|fma|f16c|avx512\w*|avx_vnni\w*|amx\w*|neon|asimd\w*|sve\w*)$")


# What a platform's records hold: MetaSchedule traces (everything TLP measures itself) or Ansor schedule steps
# (imported TenSet / auto-scheduler logs, see tlp.dataset.ansor). The featurizer follows from it.
METASCHEDULE_FORMAT, ANSOR_FORMAT = "metaschedule", "ansor"


class TargetError(TLPError, ValueError):
    """A target given by the user cannot be used."""


def parse_target(spec: str | dict[str, Any]) -> dict[str, Any]:
    """Parse a target given as a JSON object (or dict) into a plain dict, validating it with TVM.

    The old CLI form (``"llvm -mcpu=znver3"``) is rejected with a hint: TVM 0.27 accepts only JSON dicts.
    """
    if isinstance(spec, str):
        text = spec.strip()
        if not text.startswith("{"):
            raise TargetError(
                f"target {spec!r} is not a JSON object. TVM 0.27 takes targets as JSON dicts, for example "
                '\'{"kind": "llvm", "mcpu": "znver3", "num-cores": 2}\' (the old "llvm -mcpu=..." form is gone)'
            )
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as error:
            raise TargetError(f"target {spec!r} is not valid JSON: {error}") from None
    if not isinstance(spec, dict) or "kind" not in spec:
        raise TargetError(f"target {spec!r} must be a JSON object with a 'kind' field")
    from tlp._tvm import to_plain, tvm  # pylint: disable=import-outside-toplevel

    try:
        exported = tvm.target.Target(spec).export()
    except Exception as error:  # TVM raises several error types for bad targets
        raise TargetError(f"TVM rejects target {json.dumps(spec)}: {str(error).splitlines()[-1]}") from None
    return to_plain(exported)


def host_cpu_name() -> str:
    """The LLVM name of this machine's CPU, as LLVM itself detects it."""
    from tlp._tvm import tvm  # pylint: disable=import-outside-toplevel

    return str(tvm.target.codegen.llvm_get_system_cpu())


def host_target(num_cores: int | None = None) -> dict[str, Any]:
    """The default target: LLVM for this CPU (without ``mcpu`` LLVM emits generic x86, ~5x slower kernels)."""
    cores = num_cores or psutil.cpu_count(logical=False) or os.cpu_count() or 1
    return parse_target({"kind": "llvm", "mcpu": host_cpu_name(), "num-cores": int(cores)})


def host_fingerprint() -> dict[str, Any]:
    """What identifies this machine's CPU for measurement purposes."""
    model, flags = "unknown", []
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "Model") and model == "unknown":
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = sorted(f for f in value.split() if _RELEVANT_FLAGS.match(f))
    except OSError:
        pass
    return {
        "cpu_model": model,
        "llvm_cpu": host_cpu_name(),
        "isa_flags": flags,
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_cores": psutil.cpu_count(logical=True),
    }


def machine_fingerprint(target: dict[str, Any]) -> dict[str, Any]:
    """What identifies this machine for programs of ``target``: its GPU for a CUDA target (the platform is named
    after it, not after the host CPU), else its CPU (:func:`host_fingerprint`)."""
    if target.get("kind") == "cuda":
        from tlp.gpu import GPUError, detect_gpu  # pylint: disable=import-outside-toplevel

        gpu = detect_gpu()
        if gpu is None:
            raise GPUError("these records are for a CUDA target, and this machine has no visible GPU to name their "
                           "platform after: import them on the GPU's machine, or describe it with --hardware")
        return gpu
    return host_fingerprint()


# LLVM CPU features whose absence on the host makes code compiled for a target crash (SIGILL), not just slow.
_ISA_FEATURE = re.compile(r"^(sse4\.[12]|avx\w*|fma|f16c|amx[\w-]*)$")


def check_llvm_target(target: dict[str, Any]) -> None:
    """An LLVM target TLP can search and measure for: an ``mcpu`` LLVM knows (TVM only logs an unknown one and
    compiles for a generic CPU) and a ``num-cores`` (MetaSchedule's schedule rules stop with an InternalError
    without one)."""
    if target.get("kind") != "llvm":
        return
    from tlp._tvm import tvm  # pylint: disable=import-outside-toplevel

    codegen = tvm.target.codegen
    mcpu = target.get("mcpu")
    if mcpu is not None:
        triple = str(target.get("mtriple") or codegen.llvm_get_system_triple())
        if not codegen.llvm_is_valid_cpu(str(mcpu), triple):
            known = [str(c) for c in codegen.llvm_get_cpu_archlist(tvm.target.Target({"kind": "llvm",
                                                                                       "mtriple": triple}))]
            close = difflib.get_close_matches(str(mcpu), known, n=3)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise TargetError(f"target mcpu {mcpu!r}: unknown CPU for {triple} (LLVM knows {len(known)}, e.g. "
                              f"{', '.join(known[:4])}); {hint}this machine's is {host_cpu_name()!r}")
    if not target.get("num-cores"):
        cores = psutil.cpu_count(logical=False) or os.cpu_count() or 1
        raise TargetError(f"target {json.dumps(target)} has no \"num-cores\" (MetaSchedule needs it): add "
                          f"\"num-cores\": N, e.g. {cores}, this machine's physical cores")


def check_runs_here(target: dict[str, Any]) -> None:
    """Refuse an LLVM target whose instruction set this CPU lacks (an AVX-512 target on an AVX2 host).

    Such programs would die with an illegal instruction at run time, after minutes of building, or worse be stored
    as failures of the program; we say so before anything is built or stored. A CUDA target needs a GPU whose
    compute capability matches its ``arch`` and a CUDA compiler (``tlp.gpu.check_gpu_target``).
    """
    if target.get("kind") == "cuda":
        from tlp.gpu import check_gpu_target  # pylint: disable=import-outside-toplevel

        check_gpu_target(target)
        return
    if target.get("kind") != "llvm":
        return
    check_llvm_target(target)
    if "mcpu" not in target:
        return
    from tlp._tvm import tvm  # pylint: disable=import-outside-toplevel

    codegen = tvm.target.codegen
    wanted = {f for f in codegen.llvm_get_cpu_features(tvm.target.Target(target)) if _ISA_FEATURE.match(f)}
    have = set(codegen.llvm_get_cpu_features(tvm.target.Target({"kind": "llvm", "mcpu": host_cpu_name()})))
    missing = sorted(wanted - have)
    if missing:
        raise TargetError(f"target mcpu {target['mcpu']!r} needs {', '.join(missing)}, which this CPU "
                          f"({host_cpu_name()}) lacks: its programs cannot run here. Measure it on such a machine "
                          "(--rpc-tracker) or choose an older mcpu")


def isa_family(target: dict[str, Any]) -> str:
    """The vector ISA a target compiles for: ``avx512``, ``avx2``, ``sse4``, ``generic`` (LLVM CPUs) or its kind.

    Platforms of one family generate the same kind of code for a schedule, so their rankings agree most (see
    DATASET.md's platform table); it decides which head stands in for a platform that has none.
    """
    if target.get("kind") != "llvm":
        return str(target.get("kind"))
    from tlp._tvm import tvm  # pylint: disable=import-outside-toplevel

    try:
        features = set(tvm.target.codegen.llvm_get_cpu_features(tvm.target.Target(target)))
    except Exception:  # pylint: disable=broad-except  # an mcpu this LLVM does not know: no family
        return "generic"
    for family, feature in (("avx512", "avx512f"), ("avx2", "avx2"), ("sse4", "sse4.2")):
        if feature in features:
            return family
    return "generic"


# x86 vector ISAs from narrowest to widest: a head of a neighbouring family stands in better than one further away
# (a frozen-backbone SSE4.2 head trained from the AVX2 head ranked 0.674 held-out, from the AVX-512 head 0.373).
ISA_FAMILIES = ("generic", "sse4", "avx2", "avx512")


def _isa_distance(family: str, other: str) -> int:
    if family in ISA_FAMILIES and other in ISA_FAMILIES:
        return abs(ISA_FAMILIES.index(family) - ISA_FAMILIES.index(other))
    return 0 if family == other else len(ISA_FAMILIES)


def nearest_platform(wanted: "Platform", known: dict[str, dict[str, Any]]) -> tuple[str, bool]:
    """Which of ``known`` (platform id -> platform JSON) stands in best for ``wanted``; ``(id, exact)``.

    Exact id first; otherwise the closest by (same target kind, same ISA family, nearest ISA family, same mcpu,
    same core count, same CPU model), in that order of importance.
    """
    if wanted.id in known:
        return wanted.id, True
    if not known:
        raise ValueError("no platforms to choose from")
    family = isa_family(wanted.target)

    def closeness(item: tuple[str, dict[str, Any]]) -> tuple[bool | int, ...]:
        target = item[1].get("target", {})
        hardware = item[1].get("hardware", {})
        other = isa_family(target)
        return (target.get("kind") == wanted.target.get("kind"), other == family, -_isa_distance(family, other),
                target.get("mcpu") == wanted.target.get("mcpu"),
                target.get("num-cores") == wanted.target.get("num-cores"),
                hardware.get("cpu_model") == wanted.hardware.get("cpu_model"))

    return max(known.items(), key=closeness)[0], False


def nearness_ranking(info: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """Per platform of ``info`` (id -> platform JSON), the others from nearest to farthest (``nearest_platform``
    applied repeatedly; asks TVM's LLVM for ISAs, so write it where TVM is installed for use where it is not)."""
    ranking = {}
    for platform_id, description in info.items():
        others, order = {p: d for p, d in info.items() if p != platform_id}, []
        while others:
            nearest, _ = nearest_platform(Platform.from_json(description), others)
            order.append(nearest)
            others.pop(nearest)
        ranking[platform_id] = order
    return ranking


@dataclass(frozen=True)
class Platform:
    """A target plus a hardware fingerprint; ``id`` names the dataset folder of this platform."""

    target: dict[str, Any]
    hardware: dict[str, Any] = field(default_factory=dict)
    # The name a stored platform is filed under (its dataset folder), when it was named by an older rule (before the
    # ``-on-<host>`` part, say): a stored platform keeps its name, never a silently recomputed one.
    stored_id: str | None = field(default=None, compare=False, repr=False)

    @property
    def id(self) -> str:
        return self.stored_id or self.derived_id

    @property
    def derived_id(self) -> str:
        """The id today's naming rule gives this target and hardware."""
        digest = hashlib.sha1(
            json.dumps({"target": self.target, "hardware": self.hardware}, sort_keys=True).encode()
        ).hexdigest()[:8]
        kind = self.target.get("kind", "unknown")
        ansor = self.record_format == ANSOR_FORMAT
        # Ansor's GPU targets often name the card only (``-model=t4``).
        cpu = self.target.get("mcpu") or self.target.get("arch") or (ansor and self.target.get("model")) or "generic"
        cores = self.target.get("num-cores")
        core_part = f"-{cores}c" if cores else ""
        # Code for one CPU run on another (an AVX2 target on an AVX-512 host) is a platform of its own: say so.
        host = self.hardware.get("llvm_cpu")
        host_part = f"-on-{host}" if host and host != cpu else ""
        if self.hardware.get("gpu_name"):  # a GPU platform is named after its GPU (cuda-sm_90-h200-...)
            from tlp.gpu import gpu_slug  # pylint: disable=import-outside-toplevel

            host_part = f"-{gpu_slug(self.hardware['gpu_name'])}"
        prefix = "ansor-" if ansor else ""
        return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{prefix}{kind}-{cpu}{core_part}{host_part}-{digest}")

    @property
    def record_format(self) -> str:
        """``"metaschedule"`` (traces) or ``"ansor"`` (imported Ansor steps): which featurizer reads its records."""
        return str(self.hardware.get("record_format", METASCHEDULE_FORMAT))

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "target": self.target, "hardware": self.hardware}

    @staticmethod
    def from_json(data: dict[str, Any]) -> "Platform":
        return Platform(target=data["target"], hardware=data.get("hardware", {}))

    @staticmethod
    def host(target: dict[str, Any] | None = None) -> "Platform":
        """This machine, with ``target`` (default: the host target) compiled for it; for a CUDA target, this
        machine's GPU (:class:`tlp.gpu.GPUError` without one, or without a CUDA compiler)."""
        if target is not None:
            # TVM's exported form (keys, tag, defaults): a plain dict and its parsed form name the same platform
            target = parse_target(target)
        if target is not None and target.get("kind") == "cuda":
            from tlp.gpu import check_gpu_target  # pylint: disable=import-outside-toplevel

            return Platform(target=target, hardware=check_gpu_target(target))
        if target is not None:
            check_runs_here(target)
        return Platform(target=target or host_target(), hardware=host_fingerprint())

    @staticmethod
    def gpu(target: dict[str, Any], name: str, compute_capability: str | None = None,
            memory_mib: float | None = None) -> "Platform":
        """A GPU platform from a description of its GPU (no device needed): ``Platform.gpu(target, "NVIDIA H200",
        "9.0", 143771).id == "cuda-sm_90-h200-<hash>"``, the id ``Platform.host(target)`` gives on that machine."""
        from tlp.gpu import gpu_hardware  # pylint: disable=import-outside-toplevel

        return Platform(target=target, hardware=gpu_hardware(name, compute_capability, memory_mib))

    @staticmethod
    def remote(target: dict[str, Any], rpc_key: str, hardware: str | None = None) -> "Platform":
        """Devices behind an RPC tracker: we cannot read their CPU, so the key (and the user's words) name them."""
        if target.get("kind") == "llvm" and ("mcpu" not in target or not target.get("num-cores")):
            raise TargetError("an RPC platform needs an explicit 'mcpu' and 'num-cores' in its target: the remote "
                              "CPU is unknown here")
        return Platform(target=target, hardware={"rpc_key": rpc_key, "description": hardware or ""})
