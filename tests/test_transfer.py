"""Schedules transferred between tasks: another task's best trace replayed on a task of the same structure."""

import math

import pytest

from conftest import tune_context
from tlp._tvm import ms, structural_hash, tvm
from tlp.dataset.store import mean_latency
from tlp.search.search_strategy.transfer import fit_tiles, fits, replay_on, replayed_candidates, structure


def transferred_schedules(database, context):
    """The best record of every other workload in ``database`` replayed on ``context``'s task."""
    best = {}
    for record in database.get_all_tuning_records():
        key, latency = structural_hash(record.workload.mod), mean_latency(record.run_secs)
        if latency is not None and key != structural_hash(context.mod) and (key not in best or latency < best[key][0]):
            best[key] = (latency, record)
    return replayed_candidates([r for _, r in sorted(best.values(), key=lambda pair: pair[0])], context)


def test_tiles_refitted_to_a_new_extent_keep_the_inner_factors():
    assert fit_tiles([4, 2, 1, 7], 28, 64) == [2, 2, 1, 7]  # 56 -> 28: the outer factor halves
    assert fit_tiles([16, 4, 1, 1], 256, 64) == [64, 4, 1, 1]
    assert fit_tiles([1, 3], 1, 64) == [1, 1]
    assert fit_tiles([1, 128], 256, 64)[-1] <= 64  # the innermost bound holds where a factorisation allows it
    for tiles, extent in [([2, 8, 2, 2], 14), ([1, 1, 14, 4], 7), ([32, 2], 1000)]:
        refitted = fit_tiles(tiles, extent, 64)
        assert len(refitted) == len(tiles) and int(math.prod(refitted)) == extent


@pytest.fixture(scope="module")
def convolutions(host_platform):
    from tlp.workloads import load_tasks

    return load_tasks(["conv2d_nchw_1x64x56x56_o64_k3_s1_p1_d1", "conv2d_nchw_1x256x14x14_o256_k3_s1_p1_d1",
                       "dense_64x64x64"], host_platform.target)


def test_a_convolution_schedule_replays_on_another_shape_and_not_on_a_dense(convolutions, host_platform):
    source, other_shape, dense = (tune_context(t, host_platform.target) for t in convolutions)
    for space in source.space_generator.generate_design_space(source.mod):
        replayed = replay_on(space.trace, other_shape.mod)
        assert replayed is not None and all(p.apply(replayed) for p in other_shape.space_generator.postprocs)
        tiles = [[int(d) for d in inst_decision] for inst, inst_decision in replayed.trace.decisions.items()
                 if inst.kind.name == "SamplePerfectTile"]
        extents = sorted(int(math.prod(t)) for t in tiles)
        assert 14 in extents and 256 in extents and 56 not in extents  # refitted to the new loops
        assert replay_on(space.trace, dense.mod) is None  # another structure: not replayed


def test_only_traces_of_the_tasks_own_structure_are_transferred(convolutions, host_platform):
    """A trace touching the root block only (as a reshape's does) replays on a convolution and would leave it
    unscheduled: it is not transferred, nor is a dense's; the other convolution's is."""
    source, target, dense = (tune_context(t, host_platform.target) for t in convolutions)
    softmax = tune_context(*_load(["softmax_1x1000"], host_platform), host_platform.target)
    root_only = tvm.s_tir.Schedule(softmax.mod)
    root_only.annotate(root_only.get_sblock("root"), "meta_schedule.parallel", 16)
    assert replay_on(root_only.trace, target.mod) is not None  # it would replay: the structure check is needed

    database = ms.database.MemoryDatabase()
    for context, trace, seconds in ((source, source.space_generator.generate_design_space(source.mod)[0].trace, 3e-3),
                                    (dense, dense.space_generator.generate_design_space(dense.mod)[0].trace, 1e-5),
                                    (softmax, root_only.trace, 1e-6)):
        database.commit_tuning_record(ms.database.TuningRecord(
            trace, database.commit_workload(context.mod), [seconds], tvm.target.Target(host_platform.target),
            ms.arg_info.ArgInfo.from_prim_func(context.mod["main"])))
    transferred = transferred_schedules(database, target)
    assert len(transferred) == 1
    assert structure(transferred[0].sch.trace) == structure(source.space_generator.generate_design_space(
        source.mod)[0].trace)
    # A stored trace names fewer blocks than the design space (lookups of untouched blocks are dropped): it fits.
    conv_names, _ = structure(target.space_generator.generate_design_space(target.mod)[0].trace)
    assert fits((frozenset({"conv2d_nchw", "root"}), True), [(conv_names, True)])
    assert not fits((frozenset({"root"}), False), [(conv_names, True)])
    assert not fits((conv_names | {"T_add_1"}, True), [(conv_names, True)])


def test_a_transferred_program_mutates_like_the_searchs_own(convolutions, host_platform):
    """MetaSchedule's evolutionary search re-applies a stored record's trace with a mutated decision, its
    post-processing left out, and post-processes again. A replayed program stored without the ``EnterPostproc`` mark
    keeps its post-processors' instructions in that replay, and after another compute location they no longer fit:
    TVM's check fails and ends the search (a MobileNetV2 search with a schedule library, after 134 trials)."""
    source, target, _ = (tune_context(t, host_platform.target, rand_state=1) for t in convolutions)
    database = ms.database.MemoryDatabase()
    measured = source.space_generator.generate_design_space(source.mod)[0]
    measured.enter_postproc()  # as the search stores its programs (and the dataset holds them)
    assert all(p.apply(measured) for p in source.space_generator.postprocs)
    database.commit_tuning_record(ms.database.TuningRecord(
        measured.trace, database.commit_workload(source.mod), [1e-3], tvm.target.Target(host_platform.target),
        ms.arg_info.ArgInfo.from_prim_func(source.mod["main"])))
    (candidate,) = transferred_schedules(database, target)
    mutator = ms.mutator.MutateComputeLocation()
    mutator._initialize_with_tune_context(target)  # pylint: disable=protected-access
    mutated = [trace for trace in (mutator.apply(candidate.sch.trace) for _ in range(8)) if trace is not None]
    assert mutated
    for trace in mutated:
        sch = tvm.s_tir.Schedule(target.mod, debug_mask=0)
        trace.apply_to_schedule(sch, remove_postproc=True)  # the search's replay; raised before the fix
        sch.enter_postproc()
        assert all(p.apply(sch) for p in target.space_generator.postprocs)


def _load(names, host_platform):
    from tlp.workloads import load_tasks

    return load_tasks(names, host_platform.target)


def test_transferred_places_need_a_first_round_and_a_library(host_platform):
    from tlp import TLPError
    from tlp.search.presets import resolve
    from tlp.search.search_strategy.first_round import FirstRoundSearch
    from tlp.tune.run import TuneConfig

    with pytest.raises(TLPError, match="first round smaller than a batch"):
        resolve(TuneConfig(trials_per_iter=8, first_round_trials=8, first_round_transferred=1, transfer_from="d"),
                host_platform.target)
    with pytest.raises(ValueError, match="transferred must be between 0 and first_batch"):
        FirstRoundSearch(8, 1, transferred=2, library=object())
    with pytest.raises(ValueError, match="replay a schedule library's programs"):
        FirstRoundSearch(8, 2, transferred=1)
