"""Batches spread over program structures (tlp.search.diverse), on real MetaSchedule candidates."""

import pytest

from tlp._tvm import ms, structural_hash, tvm
from tlp.search.diverse import StructureDiverseSearch, spread_over_structures, structure_of


def test_a_batch_takes_the_best_of_each_structure_before_a_third_of_one():
    ranked = [("a", 0), ("a", 1), ("a", 2), ("b", 3), ("a", 4), ("c", 5)]
    assert spread_over_structures(ranked, 4, 2) == [0, 1, 3, 5]  # a's third (2) waits behind b and c
    assert spread_over_structures(ranked, 3, 1) == [0, 3, 5]
    # too few structures offered: the places left go to the best of the rest, by score
    assert spread_over_structures(ranked, 5, 1) == [0, 1, 2, 3, 5]
    assert spread_over_structures(ranked[:2], 4, 1) == [0, 1]


def _context(task, target, strategy):
    return ms.TuneContext(mod=task.mod, target=tvm.target.Target(target), space_generator="post-order-apply",
                          search_strategy=strategy, task_name=task.name, rand_state=1, num_threads=1)


@pytest.fixture(scope="module")
def softmax(host_platform):
    from tlp.workloads import load_tasks

    return load_tasks(["softmax_1x1000"], host_platform.target)[0]


def test_structure_is_the_non_tile_decisions_of_a_real_trace(softmax, host_platform):
    context = _context(softmax, host_platform.target, ms.search_strategy.EvolutionarySearch(population_size=8))
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
    context = _context(softmax, host_platform.target, strategy)
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
