"""Batches spread over program structures (tlp.search.search_strategy.diverse), on real MetaSchedule candidates."""

import numpy as np
import pytest
from tvm.ir.utils import derived_object

from tlp._tvm import ms, structural_hash
from tlp.search.search_strategy.diverse import StructureDiverseSearch, spread_over_structures, structure_of

from conftest import tune_context


def test_a_batch_takes_the_best_of_each_structure_before_a_third_of_one():
    ranked = [("a", 0), ("a", 1), ("a", 2), ("b", 3), ("a", 4), ("c", 5)]
    assert spread_over_structures(ranked, 4, 2) == [0, 1, 3, 5]  # a's third (2) waits behind b and c
    assert spread_over_structures(ranked, 3, 1) == [0, 3, 5]
    # too few structures offered: the places left go to the best of the rest, by score
    assert spread_over_structures(ranked, 5, 1) == [0, 1, 2, 3, 5]
    assert spread_over_structures(ranked[:2], 4, 1) == [0, 1]


@pytest.fixture(scope="module")
def softmax(host_platform):
    from tlp.workloads import load_tasks

    return load_tasks(["softmax_1x1000"], host_platform.target)[0]


def test_structure_is_the_non_tile_decisions_of_a_real_trace(softmax, host_platform):
    context = tune_context(softmax, host_platform.target, rand_state=1)
    trace = next(space.trace for space in context.space_generator.generate_design_space(context.mod)
                 if any(inst.kind.name == "SamplePerfectTile" for inst in space.trace.insts))
    structure = structure_of(trace)
    assert {kind for kind, _ in structure} == {"SampleCategorical", "SampleComputeLocation"}
    decisions = dict(trace.decisions.items())
    tile = next(inst for inst in decisions if inst.kind.name == "SamplePerfectTile")
    unroll = next(inst for inst in decisions if inst.kind.name == "SampleCategorical")
    other_tiles = trace.with_decision(tile, list(reversed([int(d) for d in decisions[tile]])), remove_postproc=False)
    assert structure_of(other_tiles) == structure  # tile sizes are what a structure's candidates differ in
    other_unroll = trace.with_decision(unroll, 1 - min(int(decisions[unroll]), 1), remove_postproc=False)
    assert structure_of(other_unroll) != structure


def test_every_batch_spreads_over_structures_and_the_budget_holds(softmax, host_platform):
    strategy = StructureDiverseSearch(population_size=32, max_per_structure=1)
    context = tune_context(softmax, host_platform.target, strategy, rand_state=1)
    spaces = context.space_generator.generate_design_space(context.mod)
    database = ms.database.MemoryDatabase()
    model = ms.cost_model.RandomModel(seed=0)
    strategy.pre_tuning(10, 4, spaces, database, model)
    measured, hashes = 0, set()
    while (candidates := strategy.generate_measure_candidates()) is not None:
        assert 1 <= len(candidates) <= 4
        structures = [structure_of(c.sch.trace) for c in candidates]
        assert len(set(structures)) == len(structures)  # softmax offers more structures than a batch
        hashes |= {structural_hash(c.sch.mod) for c in candidates}
        results = [ms.runner.RunnerResult(run_secs=[1e-5], error_msg=None) for _ in candidates]
        strategy.notify_runner_results(candidates, results)
        measured += len(candidates)
    strategy.post_tuning()
    assert measured == 10 and len(hashes) == 10  # the budget, no program twice
    with pytest.raises(ValueError, match="at least 1"):
        StructureDiverseSearch(population_size=8, max_per_structure=0)


@derived_object
class _MeasuredStructuresFirst(ms.cost_model.PyCostModel):
    """Scores candidates of the structures in ``measured`` above every other: a model that only exploits."""

    def __init__(self, measured: set) -> None:
        super().__init__()
        self.measured = measured

    def load(self, path: str) -> None:
        pass

    def save(self, path: str) -> None:
        pass

    def update(self, context, candidates, results) -> None:
        pass

    def predict(self, context, candidates) -> np.ndarray:
        return np.array([1.0 if structure_of(c.sch.trace) in self.measured else 0.0 for c in candidates])


def test_a_first_round_wraps_the_evolution_or_the_given_inner_search_and_clones_it():
    from tlp.search.search_strategy.first_round import FirstRoundSearch

    plain = FirstRoundSearch(population_size=8, first_batch=2)
    assert isinstance(plain.inner, ms.search_strategy.EvolutionarySearch)
    assert isinstance(plain._inst.clone().inner, ms.search_strategy.EvolutionarySearch)
    spread = FirstRoundSearch(8, 2, inner=StructureDiverseSearch(8, max_per_structure=1, pool=3))
    copy = spread._inst.clone()  # the Python side of clone(); through TVM's FFI the copy comes back as its handle
    assert isinstance(copy.inner, StructureDiverseSearch) and copy.inner is not spread.inner
    assert (copy.inner.max_per_structure, copy.inner.pool) == (1, 3)


def test_a_task_with_nothing_to_sample_is_drawn_by_a_search_of_two_per_space(host_platform):
    """A reshape or an elementwise chain may have nothing to sample: each design space is one program. Its first
    round draws them with a population of two per space, not the preset's hundreds (seconds per such task)."""
    from tlp.search.search_strategy.first_round import FirstRoundSearch, nothing_to_sample
    from tlp.workloads import load_tasks

    task = load_tasks(["residual_add_relu_c64_56x56"], host_platform.target)[0]
    strategy = FirstRoundSearch(population_size=256, first_batch=2,
                                inner=StructureDiverseSearch(256, max_per_structure=2, pool=3))
    context = tune_context(task, host_platform.target, strategy)
    spaces = context.space_generator.generate_design_space(context.mod)
    assert nothing_to_sample(spaces)
    strategy.pre_tuning(max_trials=2, num_trials_per_iter=2, design_spaces=spaces,
                        database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel())
    assert isinstance(strategy.inner, ms.search_strategy.EvolutionarySearch)
    candidates = strategy.generate_measure_candidates()
    strategy.post_tuning()
    assert len(candidates) == len(spaces)
    assert {structural_hash(c.sch.mod) for c in candidates} == \
        {structural_hash(c.sch.mod) for c in _drawn_by_a_full_search(task, host_platform.target, spaces)}


def _drawn_by_a_full_search(task, target, spaces):
    search = ms.search_strategy.EvolutionarySearch(population_size=64)
    context = tune_context(task, target, search)
    search.pre_tuning(max_trials=8, num_trials_per_iter=8, design_spaces=spaces,
                      database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel())
    try:
        return search.generate_measure_candidates()
    finally:
        search.post_tuning()
