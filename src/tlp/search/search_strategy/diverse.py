"""Batches spread over program structures: MetaSchedule's evolutionary search, each batch capped per structure.

MetaSchedule measures the cost model's top-scored candidates, a batch at a time. Those are mostly one structure
(the same unroll depth and compute locations) with different tile sizes, and among programs that close every model
we have orders pairs at about chance, so most of such a batch is a random draw from the model's favourite
structure. When the favourite is the wrong one the search never learns otherwise (BERT-tiny's ``layer_norm``: 90
programs at maximal unroll with the reductions at the root, 1.8x the latency XGBoost reached with another structure).

:class:`StructureDiverseSearch` asks the inner ``EvolutionarySearch`` for ``pool`` times the batch (its best-scored
unmeasured candidates) and measures the cost model's best of them with at most ``max_per_structure`` per
structure, filling any places left by score. A *structure* is a trace's discrete decisions other than tile sizes
(``SampleCategorical``: unroll depth and the like; ``SampleComputeLocation``), so each structure the model ranks
high is measured with its best tiles, and the model's favourite still gets the first places.

The inner search counts every candidate it hands out as measured and never proposes it again; the ones left out
here are the model's lower-scored near-duplicates of structures already in the batch, and mutation keeps making
others like them. The trial budget is kept here (the inner one is ``pool`` times larger).
"""

from __future__ import annotations

from typing import Any

from tvm.ir.utils import derived_object

from tlp._tvm import ms

STRUCTURAL_SAMPLES = ("SampleCategorical", "SampleComputeLocation")


def structure_of(trace: Any) -> tuple[tuple[str, str], ...]:
    """A trace's structure: the decisions of its sampling instructions other than tile sizes, in trace order."""
    decisions = trace.decisions
    return tuple((inst.kind.name, str(decisions[inst])) for inst in trace.insts
                 if inst.kind.name in STRUCTURAL_SAMPLES and inst in decisions)


def spread_over_structures(ranked: list[Any], size: int, max_per_structure: int) -> list[int]:
    """Indices of ``size`` items of ``ranked`` (pairs ``(structure, item)``, best first): best first, at most
    ``max_per_structure`` of one structure, then the best of the rest where too few structures were offered."""
    taken: list[int] = []
    per_structure: dict[Any, int] = {}
    for i, (structure, _) in enumerate(ranked):
        if len(taken) == size:
            break
        if per_structure.get(structure, 0) < max_per_structure:
            per_structure[structure] = per_structure.get(structure, 0) + 1
            taken.append(i)
    chosen = set(taken)
    rest = [i for i in range(len(ranked)) if i not in chosen]
    return sorted(taken + rest[:size - len(taken)])


@derived_object
class StructureDiverseSearch(ms.search_strategy.PySearchStrategy):
    """``EvolutionarySearch(population_size)`` measuring, per batch, the cost model's best candidates of ``pool``
    times the batch with at most ``max_per_structure`` of one structure."""

    def __init__(self, population_size: int, max_per_structure: int, pool: int = 4) -> None:
        super().__init__()
        if max_per_structure < 1 or pool < 1:
            raise ValueError(f"max_per_structure and pool must be at least 1, not {max_per_structure} and {pool}")
        self.population_size = population_size
        self.max_per_structure = max_per_structure
        self.pool = pool
        self.inner = ms.search_strategy.EvolutionarySearch(population_size=population_size)
        self.context: Any = None
        self.cost_model: Any = None
        self.batch = 0
        self.max_trials = 0
        self.measured = 0

    def _initialize_with_tune_context(self, context: Any) -> None:
        self.context = context
        self.inner._initialize_with_tune_context(context)  # pylint: disable=protected-access

    def pre_tuning(self, max_trials: int, num_trials_per_iter: int, design_spaces: Any, database: Any = None,
                   cost_model: Any = None) -> None:
        self.max_trials, self.batch, self.measured, self.cost_model = max_trials, num_trials_per_iter, 0, cost_model
        # The inner search stops at its own budget, counted in measured results: pool times ours never binds first.
        self.inner.pre_tuning(max_trials * self.pool, num_trials_per_iter * self.pool, design_spaces, database,
                              cost_model)

    def post_tuning(self) -> None:
        self.inner.post_tuning()
        self.cost_model = None

    def generate_measure_candidates(self) -> list[Any] | None:
        size = min(self.batch, self.max_trials - self.measured)
        if size <= 0:
            return None
        candidates = self.inner.generate_measure_candidates()
        if candidates is None:
            return None
        candidates = list(candidates)
        if len(candidates) <= size or self.cost_model is None:
            return candidates[:size]
        # Scored again: the inner search's order is its epsilon-greedy pick (a random candidate or more among the
        # best-scored ones), not the model's ranking.
        scores = [float(s) for s in self.cost_model.predict(self.context, candidates)]
        order = sorted(range(len(candidates)), key=lambda i: -scores[i])
        # structure_of once per candidate: a walk over the trace through the FFI
        ranked = [(structure_of(candidates[i].sch.trace), i) for i in order]
        taken = [ranked[k][1] for k in spread_over_structures(ranked, size, self.max_per_structure)]
        return [candidates[i] for i in taken]

    def notify_runner_results(self, measure_candidates: list[Any], results: list[Any]) -> None:
        self.inner.notify_runner_results(measure_candidates, results)
        self.measured += len(results)

    def clone(self) -> Any:
        return StructureDiverseSearch(self.population_size, self.max_per_structure, self.pool)
