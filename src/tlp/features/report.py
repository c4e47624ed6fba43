"""How well a feature configuration fits a dataset: trace-length histogram, crop coverage, collision rate.

A *collision* is two distinct programs of one task — different IR (program hash) and measurably different latency
— that featurize to the same tensor: no model can rank them apart. TLP's paper reports 1.04 % on TenSet with its
25 × 22 crop. We count a program as colliding when another program of its task has the same features, a
different program hash and a latency differing by more than ``latency_tolerance`` (relative), beyond noise.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter, defaultdict
from typing import Any

import numpy as np

from tlp.features.featurizer import FeatureConfig, TraceFeaturizer
from tlp.features.tensors import LabeledPrograms

PAPER_SEQ_LEN = 25  # the paper's crop of Ansor step sequences


def length_histogram(programs: LabeledPrograms, bin_width: int = 10) -> dict[str, int]:
    """Number of traces per length bin (instructions, post-processing included)."""
    counts: Counter = Counter(len(t[0]) // bin_width for t in programs.traces)
    return {f"{b * bin_width}-{b * bin_width + bin_width - 1}": counts[b] for b in sorted(counts)}


def collisions(programs: LabeledPrograms, featurizer: TraceFeaturizer, latency_tolerance: float = 0.05
               ) -> dict[str, Any]:
    """Programs whose features collide with a genuinely different program of the same task."""
    features = programs.featurize(featurizer)
    buckets: dict[tuple[str, bytes], list[int]] = defaultdict(list)
    for i, key in enumerate(programs.task_keys):
        buckets[(key, hashlib.sha1(features[i].tobytes()).digest())].append(i)
    hashes = programs.program_hashes or [""] * len(programs.traces)
    colliding = same_program = 0
    for members in buckets.values():
        if len(members) < 2:
            continue
        for i in members:
            others = [j for j in members if j != i]
            distinct = [j for j in others if not hashes[i] or hashes[j] != hashes[i]]
            if any(abs(programs.latencies[j] - programs.latencies[i]) > latency_tolerance * min(
                    programs.latencies[i], programs.latencies[j]) for j in distinct):
                colliding += 1
            elif len(distinct) < len(others):
                same_program += 1
    total = len(programs.traces)
    return {"programs": total, "colliding_programs": colliding, "collision_rate": colliding / total if total else 0.0,
            "same_ir_duplicates": same_program, "latency_tolerance": latency_tolerance}


def operator_family(task_name: str) -> str:
    """A task's kind without its numbering and shape: ``fused_conv2d20_add25_tir_clip8`` -> ``fused_conv2d_add_tir_clip``,
    ``layer_norm_128x768`` -> ``layer_norm``, ``conv2d_nchw_1x64x56x56_o64_k3_s1_p1_d1`` -> ``conv2d_nchw``."""
    words = []
    for word in task_name.split("_"):
        if word[:1].isdigit():  # a shape: the rest is parameters
            break
        words.append(re.sub(r"(?<=[a-z])\d+$", "", word))
    return "_".join(words) or task_name


def crop_coverage(programs: LabeledPrograms, featurizer: TraceFeaturizer) -> dict[str, Any]:
    """What ``featurizer``'s crop reads of the traces: the share it cuts, and per operator family the rows a whole
    trace takes and the share of traces whose post-processing (parallel, vectorize, unroll) it reads at all.

    Why per family: the rows a trace takes grow with the workload's blocks, so one crop reads a matmul whole and a
    multi-block reduction (layer norm, softmax) only up to its sampling decisions, and no model can rank what
    it never reads."""
    seq_len = featurizer.config.seq_len
    spans = [featurizer.row_span(trace) for trace in programs.traces]
    by_family: dict[str, list[tuple[int, int | None]]] = defaultdict(list)
    for key, span in zip(programs.task_keys, spans):
        by_family[operator_family(programs.catalogue.get(key, {}).get("name", key))].append(span)

    def reads_postprocessing(span: tuple[int, int | None]) -> bool:
        rows, start = span
        return start is not None and start < min(rows, seq_len)

    families = {
        family: {"programs": len(members), "rows_median": float(np.median([rows for rows, _ in members])),
                 "cut": float(np.mean([rows > seq_len for rows, _ in members])),
                 "postprocessing_read": float(np.mean([reads_postprocessing(span) for span in members]))}
        for family, members in sorted(by_family.items(), key=lambda item: -len(item[1]))}
    return {"cropped_traces": float(np.mean([rows > seq_len for rows, _ in spans])) if spans else 0.0,
            "postprocessing_read": float(np.mean([reads_postprocessing(span) for span in spans])) if spans else 0.0,
            "families": families}


def feature_report(programs: LabeledPrograms, config: FeatureConfig | None = None) -> dict[str, Any]:
    """Length histogram, what the crop reads (per operator family), and collisions for ``config`` and the paper's
    25 crop (with ``config``'s compact form or not)."""
    config = config or FeatureConfig()
    lengths = np.array([len(t[0]) for t in programs.traces])
    report: dict[str, Any] = {
        "programs": int(len(lengths)), "tasks": len(set(programs.task_keys)),
        "trace_length": {"min": int(lengths.min()), "median": float(np.median(lengths)),
                         "p99": float(np.percentile(lengths, 99)), "max": int(lengths.max())},
        "length_histogram": length_histogram(programs),
        "configs": {},
    }
    for seq_len in sorted({config.seq_len, PAPER_SEQ_LEN}):
        crop = FeatureConfig(**{**config.to_json(), "seq_len": seq_len})
        featurizer = TraceFeaturizer(crop).fit(programs.traces)
        report["configs"][f"{seq_len}x{crop.width}"] = {**crop_coverage(programs, featurizer),
                                                        **collisions(programs, featurizer)}
    report["compact"] = config.compact
    return report


def format_feature_report(report: dict[str, Any], max_families: int = 20) -> str:
    lines = [f"{report['programs']} programs over {report['tasks']} tasks; trace length min {report['trace_length']['min']}"
             f", median {report['trace_length']['median']:.0f}, p99 {report['trace_length']['p99']:.0f}, "
             f"max {report['trace_length']['max']}", "", "length histogram (instructions: programs)"]
    peak = max(report["length_histogram"].values())
    for span, count in report["length_histogram"].items():
        lines.append(f"  {span:>9}: {count:6d} {'#' * max(1, round(40 * count / peak)) if count else ''}")
    lines.append("")
    form = "compact rows (bookkeeping left out)" if report.get("compact") else "rows"
    for name, row in report["configs"].items():
        lines.append(f"crop {name} ({form}): {100 * row['cropped_traces']:.1f}% of traces cut, post-processing read in "
                     f"{100 * row['postprocessing_read']:.1f}%, collisions {row['colliding_programs']} "
                     f"({100 * row['collision_rate']:.2f}%), same-IR duplicates {row['same_ir_duplicates']}")
    names = list(report["configs"])
    lines += ["", f"per operator family (the {max_families} with most programs): rows of a whole trace (median), "
                  "then per crop the share cut / the share whose post-processing it reads",
              f"  {'family':32s} {'programs':>8s} {'rows':>5s}  " + "  ".join(f"{n:>13s}" for n in names)]
    first = report["configs"][names[0]]["families"]
    for family in list(first)[:max_families]:
        rows = [report["configs"][name]["families"][family] for name in names]
        cells = "  ".join(f"{100 * row['cut']:5.0f}% /{100 * row['postprocessing_read']:4.0f}%" for row in rows)
        lines.append(f"  {family[:32]:32s} {first[family]['programs']:8d} {first[family]['rows_median']:5.0f}  {cells}")
    return "\n".join(lines)
