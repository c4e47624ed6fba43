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

With a ``library`` (:class:`tlp.search.search_strategy.library.ScheduleLibrary`) and ``transferred`` > 0, that
many of the first batch's places go to a dataset's fastest stored programs of the task's nearest workloads,
replayed on this task with their tile sizes refitted (:mod:`tlp.search.search_strategy.transfer`), the cost model's
best-scored ones: a schedule measured well on a similar workload is a better first guess than what a model ranks
best among random programs. When they fill the whole first batch, the inner search does not run for it — except
where the task's nearest stored workload is far (:data:`FAR_LIBRARY_DISTANCE`): there one place stays the model's
pick. The model's places beside the library's come from a small evolutionary search (:func:`model_place_search`).
"""

from __future__ import annotations

from typing import Any

from tvm.ir.utils import derived_object

from tlp._tvm import ms, structural_hash
from tlp.search.search_strategy.transfer import replayed_candidates


def nothing_to_sample(design_spaces: Any) -> bool:
    """Whether every design space of a task is one program (no decision in its trace: a reshape, a layout change).
    Such a task's candidates are its spaces; an evolutionary search of hundreds spends seconds finding them."""
    return all(len(space.trace.decisions) == 0 for space in design_spaces)


# Extent distance (:func:`tlp.search.search_strategy.library.extent_distance`) beyond which a task's first round keeps
# one evolved pick beside the library's: ResNet-50 convolutions whose nearest stored workload lay 5.5-6.8 away ran
# the library's picks 4-6x slower than the model's evolved one, while nearly all tasks of MobileNetV2 and BERT-tiny
# lie within 4 of theirs.
FAR_LIBRARY_DISTANCE = 5.0


def model_place_search() -> Any:
    """The search for a first round's places beside the library's programs (a task far from the library, or any
    task when the library is another platform's): a fraction of the full search's draws (64 over 2 generations,
    not 256 over 4), since one pick, not a population, is what it serves (ResNet-50's far tasks: the first round in
    27 s instead of 55 s, at 41.2-41.9 ms instead of 41.3-41.6; MobileNetV2 on a host the dataset lacks: 74 s
    instead of 290 s, both at XGBoost's 1,000-trial latency)."""
    return ms.search_strategy.EvolutionarySearch(population_size=64, genetic_num_iters=2, eps_greedy=0.0)


# Draws per design space when each space is one program: enough that every space's program comes up.
DRAWS_PER_SPACE = 2


def one_program_per_space_search(design_spaces: Any) -> Any:
    """The smallest evolutionary search that still draws every space's one program."""
    population = DRAWS_PER_SPACE * len(design_spaces)
    return ms.search_strategy.EvolutionarySearch(population_size=population, init_min_unmeasured=population,
                                                 genetic_num_iters=0)


def measured_before(database: Any, mod: Any) -> bool:
    """Whether ``database`` holds a measured program of the task ``mod`` (an earlier batch or a resumed run)."""
    return database is not None and bool(database.get_top_k(database.commit_workload(mod), 1))


@derived_object
class FirstRoundSearch(ms.search_strategy.PySearchStrategy):
    """``inner`` (default ``EvolutionarySearch(population_size)``; also :class:`tlp.search.search_strategy.diverse.
    StructureDiverseSearch`) whose first batch for the task holds ``first_batch`` candidates, up to ``transferred``
    of them ``library``'s stored schedules of the workloads nearest this task's, replayed on it (one place fewer
    where the nearest lies farther than ``far_distance``)."""

    def __init__(self, population_size: int, first_batch: int, transferred: int = 0, inner: Any = None,
                 library: Any = None, far_distance: float | None = None) -> None:
        super().__init__()
        if first_batch < 1:
            raise ValueError(f"first_batch must be at least 1, not {first_batch}")
        if not 0 <= transferred <= first_batch:
            raise ValueError(f"transferred must be between 0 and first_batch ({first_batch}), not {transferred}")
        if transferred and library is None:
            raise ValueError("transferred places replay a schedule library's programs: give the library")
        self.population_size = population_size
        self.first_batch = first_batch
        self.transferred = transferred
        self.library = library
        self.far_distance = FAR_LIBRARY_DISTANCE if far_distance is None else far_distance
        self.context: Any = None
        self.first_size = first_batch  # the first batch's size for this task's budget
        self.library_places = transferred  # the first batch's places for library programs, for this task
        self.library_ranked: list[Any] | None = None  # this task's replayed library programs, best-scored first
        self.first_search: Any = None  # the first round's search where it is not ``inner`` (a far task's)
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
        if nothing_to_sample(design_spaces):
            self.inner = one_program_per_space_search(design_spaces)
            self.inner._initialize_with_tune_context(self.context)  # pylint: disable=protected-access
        self.tuning = (num_trials_per_iter, design_spaces, database, cost_model)
        self.measured, self.measured_hashes = 0, set()
        # A task an earlier run measured (a resumed run) had its first round: full batches at once.
        self.in_first_round = not measured_before(database, self.mod)
        self.library_ranked, self.first_search = None, None
        if self.in_first_round:
            first = self.first_size = min(self.first_batch, num_trials_per_iter, max_trials)
            self.library_places = min(self.transferred, first)
            if self.library_places and self.library.nearest_distance(self.mod) > self.far_distance:
                self.library_places = min(self.library_places, first - 1)
            if 0 < self.library_places < first and not nothing_to_sample(design_spaces):
                self.first_search = model_place_search()
                self.first_search._initialize_with_tune_context(self.context)  # pylint: disable=W0212
            self._searching().pre_tuning(first, first, design_spaces, database, cost_model)
        else:
            self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

    def _searching(self) -> Any:
        """The evolutionary search drawing this round's candidates."""
        return self.first_search if self.in_first_round and self.first_search is not None else self.inner

    def post_tuning(self) -> None:
        self._searching().post_tuning()
        self.tuning = None

    def generate_measure_candidates(self) -> list[Any] | None:
        if self.in_first_round and self.measured:  # the first batch is measured: full batches from here on
            self._searching().post_tuning()
            self.in_first_round, self.first_search = False, None
            remaining = self.max_trials - self.measured
            if remaining <= 0:
                return None
            num_trials_per_iter, design_spaces, database, cost_model = self.tuning
            self.inner.pre_tuning(remaining, num_trials_per_iter, design_spaces, database, cost_model)
        if self.in_first_round and self.library_places >= self.first_size:
            # The library fills the whole first round: no evolutionary search (seconds per task) for no place.
            picks = self._transferred_picks(set(self.measured_hashes), self.first_size)
            if len(picks) == self.first_size:
                return picks
        while True:
            candidates = self._searching().generate_measure_candidates()
            if candidates is None:
                return None
            fresh = [c for c in candidates if structural_hash(c.sch.mod) not in self.measured_hashes]
            # All of them measured before: the inner search now counts them as measured and proposes others.
            if fresh or not candidates:
                return self._with_transferred(fresh) if self.in_first_round and self.library_places else fresh

    def _with_transferred(self, candidates: list[Any]) -> list[Any]:
        """``candidates`` with their last places given to the model's best-scored transferred schedules."""
        exclude = self.measured_hashes | {structural_hash(c.sch.mod) for c in candidates}
        picks = self._transferred_picks(exclude, self.library_places)
        return candidates[:max(0, self.first_size - len(picks))] + picks

    def _transferred_picks(self, exclude: set[int], count: int) -> list[Any]:
        """Up to ``count`` of the library's schedules of the nearest workloads, replayed on this task (none in
        ``exclude``), the cost model's best-scored first. Replayed and scored once per first round."""
        _, design_spaces, database, cost_model = self.tuning
        if database is None or cost_model is None:
            return []
        if self.library_ranked is None:
            transferred = replayed_candidates(self.library.records_for(self.mod), self.context, self.measured_hashes,
                                              list(design_spaces))
            scores = cost_model.predict(self.context, transferred) if transferred else []
            order = sorted(range(len(transferred)), key=lambda i: -float(scores[i]))
            self.library_ranked = [(structural_hash(transferred[i].sch.mod), transferred[i]) for i in order]
        return [candidate for key, candidate in self.library_ranked if key not in exclude][:count]

    def notify_runner_results(self, measure_candidates: list[Any], results: list[Any]) -> None:
        self._searching().notify_runner_results(measure_candidates, results)
        self.measured += len(results)
        self.measured_hashes.update(structural_hash(c.sch.mod) for c in measure_candidates)

    def clone(self) -> Any:
        # A Python strategy's own clone(): through TVM's FFI the copy would come back as a bare handle.
        inner = self.inner._inst.clone() if hasattr(self.inner, "_inst") else self.inner.clone()
        return FirstRoundSearch(self.population_size, self.first_batch, self.transferred, inner, self.library,
                                self.far_distance)
