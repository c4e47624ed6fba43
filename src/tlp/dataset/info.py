"""``tlp dataset info``: what a dataset holds, per platform, and how noisy its timings are."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from tlp.dataset.collect import DEFAULT_LOAD_THRESHOLD, PRIMARY_SOURCES, origin_from_meta
from tlp.dataset.store import LOST_WORKLOAD, Dataset, MeasuredProgram, PlatformStore, ReadReport


SEARCHED_ENOUGH = 96  # programs per network task the dataset aims at (issue 10)


@dataclass(frozen=True, slots=True)
class ProgramSummary:
    """What the statistics need of one program's preferred measurement, without its trace: every program's parsed
    trace kept at once took over 10 GB on datasets/tlp-cpu."""

    id: str
    workload_key: str
    latency: float | None
    noise_cv: float | None
    foreign_load: float
    has_decisions: bool
    origin: dict[str, Any]  # as this measurement states it; a transfer's is resolved through first origins


def summarize(program: MeasuredProgram) -> ProgramSummary:
    """The summary of one measurement."""
    return ProgramSummary(program.id, program.workload_key, program.latency, program.noise_cv,
                          program.meta.get("foreign_load") or 0.0, has_decisions(program.trace_json),
                          origin_from_meta(program.meta))


def latest_summaries(store: PlatformStore, report: ReadReport | None = None,
                     each: Callable[[MeasuredProgram], None] | None = None) -> dict[str, ProgramSummary]:
    """:meth:`PlatformStore.latest_programs` as summaries: one read, one measurement at a time in memory."""
    return store.latest_programs(report, each, keep=summarize)


def _read_all_platforms(dataset: Dataset, reports: dict[str, ReadReport]
                        ) -> tuple[dict[str, dict[str, ProgramSummary]], dict[str, dict[str, Any]]]:
    """Each platform's programs (summaries), and per program id the first origin found on any platform."""
    # A re-measured or transferred program's origin is that of its first measurement (any platform), so every
    # platform is read before any origin is resolved.
    first_origins: dict[str, dict[str, Any]] = {}
    collect = _origin_collector(first_origins)
    stored = {platform_id: latest_summaries(dataset.store(platform_id), report, each=collect)
              for platform_id, report in reports.items()}
    return stored, first_origins


def dataset_info(dataset: Dataset, load_threshold: float = DEFAULT_LOAD_THRESHOLD) -> dict[str, Any]:
    """Counts over unique programs (the preferred measurement of each), per platform and in total."""
    catalogue = dataset.catalogue()
    platforms: dict[str, Any] = {}
    all_tasks: set[str] = set()
    totals = {"records": 0, "valid_records": 0, "failed_records": 0, "measurements": 0, "loaded_records": 0}
    all_cvs: list[float] = []
    valid_per_key: dict[str, int] = {}
    reports = {platform_id: ReadReport() for platform_id in dataset.platform_ids()}
    stored, first_origins = _read_all_platforms(dataset, reports)
    network_keys = {key for key, entry in catalogue.items()
                    if any(not n.startswith("op:") for n in entry.get("networks", {}))}
    for platform_id, programs in stored.items():
        store = dataset.store(platform_id)
        report = reports[platform_id]
        measurements = sum(1 for _ in store.table_lines(store.records, ReadReport()))
        # Records lost: those of damaged record segments, plus readable ones whose workload line was lost.
        lost_lines = report.lost_lines(store.records)
        lost_records = None if lost_lines is None else lost_lines + report.skipped[LOST_WORKLOAD]
        valid = [p for p in programs.values() if p.latency is not None]
        cvs = [cv for cv in (p.noise_cv for p in valid) if cv is not None]
        is_loaded = [p.foreign_load > load_threshold for p in valid]
        loaded = sum(is_loaded)
        quiet_cvs = [p.noise_cv for p, busy in zip(valid, is_loaded) if not busy and p.noise_cv is not None]
        loaded_cvs = [p.noise_cv for p, busy in zip(valid, is_loaded) if busy and p.noise_cv is not None]
        tasks = {p.workload_key for p in programs.values()}
        for program in valid:
            valid_per_key[program.workload_key] = valid_per_key.get(program.workload_key, 0) + 1
        all_tasks |= tasks
        all_cvs.extend(cvs)
        valid_here = Counter(p.workload_key for p in valid)
        per_task = [valid_here[key] for key in tasks]
        per_network_task = [valid_here[key] for key in tasks & network_keys]
        # A task whose traces sample nothing has one program: no amount of data or search adds a second one, so
        # "programs per network task" is also given over the tasks whose design space has choices.
        tunable = {p.workload_key for p in programs.values() if p.has_decisions}
        per_tunable_network_task = [valid_here[key] for key in tasks & network_keys & tunable]
        # Where more search pays: per network, its tunable tasks still short of 96 programs.
        short = Counter(network for key in tasks & network_keys & tunable if valid_here[key] < SEARCHED_ENOUGH
                        for network in catalogue[key].get("networks", {}) if not network.startswith("op:"))
        platforms[platform_id] = {
            "target": store.platform.target,
            "hardware": store.platform.hardware,
            "tasks": len(tasks),
            "records": len(programs),
            "valid_records": len(valid),
            "failed_records": len(programs) - len(valid),
            "measurements": measurements,
            "loaded_records": loaded,
            "noise_cv_median": statistics.median(cvs) if cvs else None,
            "noise_cv_p90": _quantile(cvs, 0.9),
            # Noise of records timed on a quiet machine vs under foreign load: how much load costs in precision.
            "noise_cv_median_quiet": statistics.median(quiet_cvs) if quiet_cvs else None,
            "noise_cv_median_loaded": statistics.median(loaded_cvs) if loaded_cvs else None,
            "valid_per_task_min": min(per_task) if per_task else 0,
            "valid_per_task_median": statistics.median(per_task) if per_task else 0,
            "valid_per_network_task_median": statistics.median(per_network_task) if per_network_task else 0,
            "network_tasks": len(per_network_task),
            "one_program_network_tasks": len(per_network_task) - len(per_tunable_network_task),
            "valid_per_tunable_network_task_median": (statistics.median(per_tunable_network_task)
                                                      if per_tunable_network_task else 0),
            "tunable_network_tasks_with_at_least": {str(n): sum(v >= n for v in per_tunable_network_task)
                                                    for n in (32, 64, SEARCHED_ENOUGH)},
            "tunable_tasks_below_96_per_network": dict(sorted(short.items(), key=lambda item: (-item[1], item[0]))),
            "origins": _origin_counts(valid, first_origins),
            "skipped_lines": dict(report.skipped),
            "skipped_examples": report.examples,
            "damaged_segments": [d.to_json() for d in report.damaged],
            "lost_records": "unknown" if lost_records is None else lost_records,
        }
        totals["records"] += len(programs)
        totals["valid_records"] += len(valid)
        totals["failed_records"] += len(programs) - len(valid)
        totals["measurements"] += measurements
        totals["loaded_records"] += loaded
    per_network: dict[str, dict[str, int]] = {}
    for key, entry in catalogue.items():
        for network in entry.get("networks", {}):
            row = per_network.setdefault(network, {"tasks_in_catalogue": 0, "tasks_measured": 0, "valid_records": 0})
            row["tasks_in_catalogue"] += 1
            if key in all_tasks:
                row["tasks_measured"] += 1
                row["valid_records"] += valid_per_key.get(key, 0)
    networks = sorted(
        {n for key in all_tasks for n in catalogue.get(key, {}).get("networks", {}) if not n.startswith("op:")}
    )
    operator_tasks = sum(
        1 for key in all_tasks if any(n.startswith("op:") for n in catalogue.get(key, {}).get("networks", {}))
    )
    return {
        "path": str(dataset.path),
        "platforms": list(platforms),
        "tasks": len(all_tasks),
        "networks": networks,
        "operator_tasks": operator_tasks,
        **totals,
        "noise_cv_median": statistics.median(all_cvs) if all_cvs else None,
        "load_threshold": load_threshold,
        "per_network": dict(sorted(per_network.items())),
        "per_platform": platforms,
    }


def has_decisions(trace_json: Any) -> bool:
    """Whether a stored trace (``[instructions, decisions]``) sampled anything: tile sizes, unroll, locations."""
    return isinstance(trace_json, list) and len(trace_json) > 1 and bool(trace_json[1])


def _origin_collector(origins: dict[str, dict[str, Any]]) -> Callable[[MeasuredProgram], None]:
    """A visitor that keeps, per program id, the most detailed origin (round, model) its measurements state."""

    def collect(program: MeasuredProgram) -> None:
        origin = origin_from_meta(program.meta)
        if origin.get("source") in PRIMARY_SOURCES:
            known = origins.get(program.id)
            if known is None or len(origin) > len(known):
                origins[program.id] = origin

    return collect


def _resolved_origin(program: ProgramSummary, first_origins: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The program's own origin, or, for a transfer / re-measurement, that of its first measurement."""
    if program.origin.get("source") in PRIMARY_SOURCES:
        return program.origin
    return first_origins.get(program.id, {"source": "unknown"})


def task_origins(dataset: Dataset, platform_id: str) -> dict[str, Counter]:
    """Per task: how many of ``platform_id``'s valid programs each source produced (``collect``'s random or
    evolved draws, a search, an import; the same sources as ``dataset_info``'s "origins"), a re-measured program
    counted under its first measurement's origin (which is why every platform is read)."""
    stored, first_origins = _read_all_platforms(dataset, {p: ReadReport() for p in dataset.platform_ids()})
    if platform_id not in stored:
        raise KeyError(f"{dataset.path}: no platform {platform_id} (it has {', '.join(stored)})")
    per_task: dict[str, Counter] = {}
    for program in stored[platform_id].values():
        if program.latency is not None:
            source = _resolved_origin(program, first_origins)["source"]
            per_task.setdefault(program.workload_key, Counter())[source] += 1
    return per_task


def _origin_counts(valid: list[ProgramSummary], first_origins: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """How this platform's valid programs were produced: collect's random / evolved draws, a search's programs
    (by round: the task's first batch or a later one; by guiding cost model), imports; transfers resolved."""
    kinds: Counter = Counter()
    rounds: Counter = Counter()
    guided_by: Counter = Counter()
    for program in valid:
        origin = _resolved_origin(program, first_origins)
        kinds[origin["source"]] += 1
        if origin["source"] == "search":
            rounds["unknown" if origin.get("round") is None else "0" if origin["round"] == 0 else "later"] += 1
            guided_by[origin.get("cost_model") or "unknown"] += 1
    return {"sources": dict(kinds.most_common()), "search_rounds": dict(rounds), "search_guided_by":
            dict(guided_by.most_common())}


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def format_info(info: dict[str, Any]) -> str:
    """A readable summary of :func:`dataset_info`."""
    lines = [
        f"dataset {info['path']}",
        f"  tasks {info['tasks']} ({info['operator_tasks']} operator tasks), networks {len(info['networks'])}: "
        + ", ".join(info["networks"]),
        f"  records {info['records']}: {info['valid_records']} valid, {info['failed_records']} failed "
        f"({info['measurements']} measurements incl. re-measurements)",
        f"  noise: median coefficient of variation of repeats {_fmt(info['noise_cv_median'])}; "
        f"{info['loaded_records']} valid records measured under foreign load > {info['load_threshold']:.0%}",
    ]
    networks = {n: r for n, r in info["per_network"].items() if not n.startswith("op:") and r["tasks_measured"]}
    for network, row in networks.items():
        lines.append(f"    {network}: {row['tasks_measured']}/{row['tasks_in_catalogue']} tasks, "
                     f"{row['valid_records']} valid records")
    for platform_id, p in info["per_platform"].items():
        # Platforms of one machine differ by target: say which code ran on which CPU.
        target, hardware = p["target"], p["hardware"]
        lines.append(f"  platform {platform_id}: {target.get('kind')} mcpu={target.get('mcpu', '-')} "
                     f"num-cores={target.get('num-cores', '-')} on {hardware.get('cpu_model', hardware)}"
                     + (f" ({hardware['llvm_cpu']})" if hardware.get("llvm_cpu") else ""))
        lines.append(
            f"    tasks {p['tasks']}, records {p['records']} ({p['valid_records']} valid, {p['failed_records']} failed), "
            f"valid per task min {p['valid_per_task_min']} / median {p['valid_per_task_median']}, "
            f"noise cv median {_fmt(p['noise_cv_median'])} p90 {_fmt(p['noise_cv_p90'])} (quiet "
            f"{_fmt(p['noise_cv_median_quiet'])}, loaded {_fmt(p['noise_cv_median_loaded'])}), loaded {p['loaded_records']}"
        )
        if p["network_tasks"]:
            tunable, at_least = p["network_tasks"] - p["one_program_network_tasks"], p["tunable_network_tasks_with_at_least"]
            lines.append(f"    network tasks {p['network_tasks']}: valid per task median {p['valid_per_network_task_median']}; "
                         f"the {tunable} with a design space to search (the other {p['one_program_network_tasks']} "
                         f"hold one program): median {p['valid_per_tunable_network_task_median']}, with >= 32 / 64 / 96: "
                         f"{at_least['32']} / {at_least['64']} / {at_least['96']}")
            if p["tunable_tasks_below_96_per_network"]:
                lines.append("    tunable tasks with < 96 programs, per network: " + ", ".join(
                    f"{network} {count}" for network, count in p["tunable_tasks_below_96_per_network"].items()))
        origins = p["origins"]
        lines.append("    produced by: " + ", ".join(f"{k} {v}" for k, v in origins["sources"].items())
                     + (f"; search rounds: first {origins['search_rounds'].get('0', 0)}, later "
                        f"{origins['search_rounds'].get('later', 0)}, unknown {origins['search_rounds'].get('unknown', 0)}"
                        "; guided by " + ", ".join(f"{k} {v}" for k, v in origins["search_guided_by"].items())
                        if origins["search_guided_by"] else ""))
        for reason, count in p["skipped_lines"].items():
            lines.append(f"    skipped {count}: {reason}")
        for example in p["skipped_examples"][:3]:
            lines.append(f"      e.g. {example}")
        for damage in p["damaged_segments"]:
            lost = "unknown" if damage["lost_lines"] is None else damage["lost_lines"]
            lines.append(f"    skipped damaged segment {damage['path']} ({damage['problem']}): {lost} lines lost")
        if p["damaged_segments"]:
            lines.append(f"    records lost to damage: {p['lost_records']}")
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"
