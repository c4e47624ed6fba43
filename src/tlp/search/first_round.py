"""A small first batch per task, then full batches: MetaSchedule's evolutionary search, started by a trained model.

MetaSchedule measures one full batch of every task before it compares tasks (the gradient scheduler's first
round). That warm-up is what a cost model learning from scratch needs; a trained model (TLP) already ranks a
task's candidates, so measuring its top few is enough to know where each task stands. On a whole network the first
round is most of a small budget (MobileNetV2, 57 tasks at batches of 32: ~1,050 trials before the network has a
latency at all), so shrinking it is what lets the later, gradient-chosen rounds spend the budget on the tasks that
matter.

:class:`FirstRoundSearch` wraps ``EvolutionarySearch``: its first call generates ``first_batch`` candidates (the
model's best, as the evolutionary search ranks them), then it restarts the inner search with the full batch size
for the rest of the task's budget. The restarted search does not know what was measured (MetaSchedule's state
keeps that only in memory, and seeds its population from the database's best), so candidates measured before are
filtered out here rather than measured twice.

With ``transferred`` > 0, that many of the first batch's places go to schedules of *other* tasks: the best
measured program of every other workload in the tuning database, replayed on this task with its tile sizes refitted
(:mod:`tlp.search.transfer`), the cost model's best-scored ones. On a network whose tasks repeat one structure at
many shapes, a schedule that measured well on a sibling task is a better first guess than what a model ranks best
among random programs; which sibling's schedule fits is the model's call. With a ``library``
(:class:`tlp.search.library.ScheduleLibrary`) the transferred schedules come from a dataset instead: the fastest
stored programs of the task's nearest workloads, replayed on it.

With ``member_picks`` > 0 (a ``chooser``: :class:`tlp.search.cost_model.TLPCostModel` of an ensemble or a cascade),
the first batch is chosen from a pool of :data:`MEMBER_POOL` candidates the inner search offers: the model's best,
then that many of its networks' own first choices (:meth:`~tlp.search.cost_model.TLPCostModel.first_choices`: each
ensemble member's favourite among the programs the cascade re-ranks), the ones the whole model ranks highest, then
the model's next best. Why: two picks per task decide a network's latency for the first ~100 trials, and the
model's second-best is mostly its best's near twin; where the members disagree the mean is unsure, and a member's
own favourite hedges it. Scored on the stored held-out programs (``benchmarks/first_round_picks.py``) that rule was
at or above the model's top 2 in 7 of 8 network x platform cells (+0.00 to +0.04 TenSet top-k). In searches on a
Rocket Lake (200 trials, re-timed) it took BERT-tiny to XGBoost's 1,000-trial final in 206 / 79 trials where the
model's top 2 took 836 / 127, but traded seeds on ResNet-50 and lost on MobileNetV2, so it is off by default
(benchmarks/README.md, "The first round's picks in real searches").
"""

from __future__ import annotations

from typing import Any

from tvm.ir.utils import derived_object

from tlp._tvm import ms, structural_hash
from tlp.search.transfer import replayed_candidates, transferred_schedules

# Candidates the first round chooses member picks among: a cascade's re-ranked share (its ``least``) in one call.
MEMBER_POOL = 32


def measured_before(database: Any, mod: Any) -> bool:
    """Whether ``database`` holds a measured program of the task ``mod`` (an earlier batch or a resumed run)."""
    return database is not None and bool(database.get_top_k(database.commit_workload(mod), 1))


@derived_object
class FirstRoundSearch(ms.search_strategy.PySearchStrategy):
    """``inner`` (default ``EvolutionarySearch(population_size)``; also :class:`tlp.search.diverse.
    StructureDiverseSearch`) whose first batch for the task holds ``first_batch`` candidates, up to ``transferred``
    of them other tasks' best schedules replayed on this one (those of ``library``'s workloads nearest this task's,
    when given), up to ``member_picks`` of them the model's networks' own first choices (``chooser``'s
    ``first_choices``)."""

    def __init__(self, population_size: int, first_batch: int, transferred: int = 0, inner: Any = None,
                 library: Any = None, member_picks: int = 0, chooser: Any = None) -> None:
        super().__init__()
        if first_batch < 1:
            raise ValueError(f"first_batch must be at least 1, not {first_batch}")
        if not 0 <= transferred <= first_batch:
            raise ValueError(f"transferred must be between 0 and first_batch ({first_batch}), not {transferred}")
        if not 0 <= member_picks < first_batch:
            raise ValueError(f"member_picks must be between 0 and first_batch - 1 ({first_batch - 1}: the first "
                             f"place is the model's best), not {member_picks}")
        if member_picks and not hasattr(chooser, "first_choices"):
            raise ValueError("member picks need the TLP cost model (its networks' own first choices) as chooser")
        self.population_size = population_size
        self.first_batch = first_batch
        self.transferred = transferred
        self.library = library
        self.member_picks = member_picks
        self.chooser = chooser
        self.context: Any = None
        self.first_size = first_batch  # the first batch's size for this task's budget
        self.inner = (inner if inner is not None
                      else ms.search_strategy.EvolutionarySearch(population_size=population_size))
        self.tuning: tuple[Any, ...] | None = None  # pre_tuning's arguments after max_trials
        self.max_trials = 0
        self.measured = 0  # candidates of this task measured so far
        self.measured_hashes: set[int] = set()
        self.in_first_round = True
        self.mod: Any = None  # the task's workload (from the tune context)

    def _initialize_with_tune_context(self, context: Any) -> None:
        self.mod = context.mod
        self.context = context
        self.inner._initialize_with_tune_context(context)  # pylint: disable=protected-access

    def pre_tuning(self, max_trials: int, num_trials_per_iter: int, design_spaces: Any, database: Any = None,
                   cost_model: Any = None) -> None:
        self.max_trials = max_trials
        self.tuning = (num_trials_per_iter, design_spaces, database, cost_model)
        self.measured, self.measured_hashes = 0, set()
        # A task an earlier run measured (a resumed run) had its first round: full batches at once.
        self.in_first_round = not measured_before(database, self.mod)
        if self.in_first_round:
            first = self.first_size = min(self.first_batch, num_trials_per_iter, max_trials)
            offered = max(first, MEMBER_POOL) if self.member_picks else first  # the pool picks are chosen from
            self.inner.pre_tuning(offered, offered, design_spaces, database, cost_model)
        else:
            self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        self.inner.post_tuning()
        self.tuning = None

    def generate_measure_candidates(self) -> list[Any] | None:
        if self.in_first_round and self.measured:  # the first batch is measured: full batches from here on
            self.in_first_round = False
            self.inner.post_tuning()
            remaining = self.max_trials - self.measured
            if remaining <= 0:
                return None
            num_trials_per_iter, design_spaces, database, cost_model = self.tuning
            self.inner.pre_tuning(remaining, num_trials_per_iter, design_spaces, database, cost_model)
        while True:
            candidates = self.inner.generate_measure_candidates()
            if candidates is None:
                return None
            fresh = [c for c in candidates if structural_hash(c.sch.mod) not in self.measured_hashes]
            # All of them measured before: the inner search now counts them as measured and proposes others.
            if fresh or not candidates:
                if self.in_first_round and self.member_picks:
                    fresh = self._with_member_picks(fresh)
                return self._with_transferred(fresh) if self.in_first_round and self.transferred else fresh

    def _with_member_picks(self, pool: list[Any]) -> list[Any]:
        """The first batch of ``pool``: the model's best, then its networks' own first choices (the best-ranked
        ``member_picks`` of them), then the model's next best."""
        if len(pool) <= 1:
            return pool
        scores = self.chooser.predict(self.context, pool)
        ranked = sorted(range(len(pool)), key=lambda i: -float(scores[i]))
        choices = sorted((i for i in self.chooser.first_choices(self.context, pool) if i != ranked[0]),
                         key=lambda i: -float(scores[i]))
        taken = [ranked[0], *choices[:self.member_picks]]
        taken += [i for i in ranked if i not in taken][:max(0, self.first_size - len(taken))]
        return [pool[i] for i in taken[:self.first_size]]

    def _with_transferred(self, candidates: list[Any]) -> list[Any]:
        """``candidates`` with their last places given to the model's best-scored transferred schedules."""
        _, design_spaces, database, cost_model = self.tuning
        if database is None or cost_model is None:
            return candidates
        exclude = self.measured_hashes | {structural_hash(c.sch.mod) for c in candidates}
        if self.library is not None:
            transferred = replayed_candidates(self.library.records_for(self.mod), self.context, exclude,
                                              list(design_spaces))
        else:
            transferred = transferred_schedules(database, self.context, exclude, list(design_spaces))
        if not transferred:
            return candidates
        scores = cost_model.predict(self.context, transferred)
        ranked = [transferred[i] for i in sorted(range(len(transferred)), key=lambda i: -float(scores[i]))]
        picks = ranked[:min(self.transferred, self.first_size)]
        return candidates[:max(0, self.first_size - len(picks))] + picks

    def notify_runner_results(self, measure_candidates: list[Any], results: list[Any]) -> None:
        self.inner.notify_runner_results(measure_candidates, results)
        self.measured += len(results)
        self.measured_hashes.update(structural_hash(c.sch.mod) for c in measure_candidates)

    def clone(self) -> Any:
        # A Python strategy's own clone(): through TVM's FFI the copy would come back as a bare handle.
        inner = self.inner._inst.clone() if hasattr(self.inner, "_inst") else self.inner.clone()
        return FirstRoundSearch(self.population_size, self.first_batch, self.transferred, inner, self.library,
                                self.member_picks, self.chooser)
