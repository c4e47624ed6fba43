"""``tlp adapt``: a cost model for this machine from a few hundred measurements (MTL-TLP's promise).

1. Measure a sample of the dataset's programs here (whole tasks: a share of the held-out networks' tasks, to
   report a held-out score, and a share of the training tasks), through :func:`tlp.dataset.collect.remeasure`:
   resumable and kill-safe like ``tlp collect``, stored in the dataset under this platform. With both fractions 0
   (``tlp adapt --platform ID``: another machine's stored programs) nothing is measured.
2. Train this platform's head on the training part: a new head starting as a copy of the nearest platform's head,
   on the shared backbone, lightly fine-tuned (0.1x the head's learning rate) or frozen. The few-shot experiment
   (benchmarks/README.md, "MTL-TLP") found fine-tuning as good or better, and 7 % of the programs enough.
3. Score the held-out part with the nearest head (what this machine got before) and with its own head, and save
   the model (every packaged head plus this one) where ``TLPCostModel()`` and ``tlp tune`` look first
   (:func:`tlp.models.adapted_model_path`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from tlp import TLPError
from tlp.dataset.collect import CollectSummary, remeasure
from tlp.dataset.measure import MeasureConfig
from tlp.dataset.store import Dataset, DatasetError
from tlp.evaluation import score_head
from tlp.features.tensors import MIN_HEAD_PROGRAMS, load_programs
from tlp.model.estimator import TLPModel
from tlp.platform import Platform, nearest_platform
from tlp.workloads import held_out_networks

# Shares measured by default: chosen from the few-shot experiment (benchmarks/README.md, "MTL-TLP").
DEFAULT_TRAIN_FRACTION = 0.07
DEFAULT_HELD_OUT_FRACTION = 0.07
# Heads averaged when the backbone is frozen: on the Zen 3 and Zen 2 held-out networks the mean of 4 heads (seeds)
# ranked above each of the 6 single heads trained for it (benchmarks/README.md, "Head soups").
DEFAULT_HEAD_SOUP = 4


@dataclass
class AdaptReport:
    platform: str
    nearest_head: str
    measured_now: int
    train_programs: int
    test_programs: int
    freeze_backbone: bool
    # None when no held-out program was measured here (nothing to score on), so the JSON stays valid JSON
    top1_nearest_head: float | None
    top1_own_head: float | None
    top5_nearest_head: float | None
    top5_own_head: float | None
    measure_seconds: float
    train_seconds: float
    out: str
    per_network: dict[str, Any] = field(default_factory=dict)
    head_soup: int = 1

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def source_platform(dataset: Dataset, exclude: str) -> str:
    """The platform whose programs to re-measure: the one with the most stored records (not this one)."""
    candidates = [p for p in dataset.platform_ids() if p != exclude]
    if not candidates:
        raise DatasetError(f"{dataset.path}: no platform to take programs from (it holds only {exclude or 'nothing'})")
    return max(candidates, key=lambda p: sum(1 for _ in dataset.store(p).records.lines()))


def adapt(
    dataset: Dataset,
    base: TLPModel,
    platform: Platform,
    out: Path,
    train_fraction: float = DEFAULT_TRAIN_FRACTION,
    held_out_fraction: float = DEFAULT_HELD_OUT_FRACTION,
    freeze_backbone: bool = False,
    source: str | None = None,
    measure_config: MeasureConfig | None = None,
    progress: bool = True,
    on_batch: Callable[[CollectSummary], None] | None = None,
    min_programs: int = MIN_HEAD_PROGRAMS,
    held_out: Sequence[str] | None = None,
    head_soup: int | None = None,
) -> AdaptReport:
    """Measure a sample here, train this platform's head on ``base``, save to ``out``; see the module doc.

    ``held_out``: networks whose programs the head never trains on and is scored on (default: the zoo's held-out
    networks). Naming the network a search check will tune keeps that check fair when this platform already
    holds programs of it (a user's own tuning runs). Fractions of 0 measure nothing: the head then trains on
    what the dataset already holds for this platform. ``head_soup``: train the head that many times (seeds) and
    keep the mean of their weights (``TLPModel.fit_head(soup=...)``; needs ``freeze_backbone``); default
    ``DEFAULT_HEAD_SOUP`` with a frozen backbone, 1 otherwise.
    """
    if head_soup is None:
        head_soup = DEFAULT_HEAD_SOUP if freeze_backbone else 1
    if head_soup < 1:
        raise TLPError(f"head_soup must be at least 1 (heads to average), got {head_soup}")
    if head_soup > 1 and not freeze_backbone:
        raise TLPError("a head soup averages heads trained on the same backbone: add --freeze-backbone")
    if not base.platforms:
        raise DatasetError("the base model names no platform for its head(s); train it with tlp train first")
    info = base.meta.get("platform_info") or {}
    nearest, _ = nearest_platform(platform, {p: info.get(p, {}) for p in base.platforms})
    held_out = list(held_out_networks() if held_out is None else held_out)
    started = time.monotonic()
    summary = CollectSummary()
    if train_fraction > 0 or held_out_fraction > 0:  # both 0: nothing to measure (and no TVM pools to start)
        source_id = source or source_platform(dataset, platform.id)
        summary = remeasure(dataset, dataset.store(source_id), platform, measure_config, fraction=train_fraction,
                            first_networks=held_out, first_fraction=held_out_fraction, progress=progress,
                            on_batch=on_batch)
    measure_seconds = time.monotonic() - started
    programs = load_programs(dataset, platform.id)
    train, test = programs.split_by_network(set(held_out))
    if len(train.traces) < min_programs:
        more = ("raise fraction (tlp adapt --set fraction=F)" if train_fraction > 0 else
                "measure more of its programs (tlp adapt --set fraction=F on that machine, or tlp collect)")
        raise DatasetError(f"{dataset.path}/{platform.id}: {len(train.traces)} valid training programs stored for "
                           f"this platform (kept); a head needs at least {min_programs}: {more}")
    before = _held_out_scores(base, test, nearest, held_out)
    started = time.monotonic()
    base.fit_head(train, copy_of=nearest, freeze_backbone=freeze_backbone, progress=progress, soup=head_soup)
    train_seconds = time.monotonic() - started
    base.meta.setdefault("platform_info", {})[platform.id] = platform.to_json()
    after = _held_out_scores(base, test, platform.id, held_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    base.save(out)
    return AdaptReport(
        platform=platform.id, nearest_head=nearest, measured_now=summary.measured, train_programs=len(train.traces),
        test_programs=len(test.traces), freeze_backbone=freeze_backbone,
        top1_nearest_head=before.get("top1"), top1_own_head=after.get("top1"),
        top5_nearest_head=before.get("top5"), top5_own_head=after.get("top5"),
        measure_seconds=round(measure_seconds, 1), train_seconds=round(train_seconds, 1), out=str(out),
        head_soup=head_soup,
        per_network={"nearest_head": before.get("per_network", {}), "own_head": after.get("per_network", {})})


def _held_out_scores(model: TLPModel, test: Any, platform_id: str, held_out: Sequence[str]) -> dict[str, Any]:
    """TenSet top-k of one head on this machine's held-out sample (empty when the sample has no test task)."""
    if not test.traces:
        return {}
    networks = sorted({n for k in set(test.task_keys) for n in test.networks_of(k)} & set(held_out))
    result = score_head(model, test, platform_id, networks)
    return {"top1": result["top1"], "top5": result["top5"], "per_network": result["per_network"]}


def format_adapt_report(report: AdaptReport) -> str:
    if report.top1_own_head is None or report.top1_nearest_head is None:
        score = ("held-out sample: no program of the held-out networks measured here, so no score "
                 "(raise held_out_fraction: tlp adapt --set held_out_fraction=F)")
    else:
        score = (f"held-out sample ({report.test_programs} programs): top-1 {report.top1_own_head:.3f} with this "
                 f"machine's head vs {report.top1_nearest_head:.3f} with the nearest platform's "
                 f"({report.nearest_head}); top-5 {report.top5_own_head:.3f} vs {report.top5_nearest_head:.3f}")
    return "\n".join([
        f"platform {report.platform}: head trained on {report.train_programs} programs measured here "
        f"({report.measured_now} new; {report.measure_seconds:.0f} s measuring, {report.train_seconds:.0f} s training, "
        f"backbone {'frozen' if report.freeze_backbone else 'fine-tuned'}"
        f"{f'; the mean of {report.head_soup} heads' if report.head_soup > 1 else ''})",
        score,
        f"saved {report.out}: TLPCostModel() and tlp tune use it on this machine from now on",
    ])
