"""The schedule library: a dataset's fastest programs of a task's nearest stored workloads, replayed on the task."""

import math

import pytest

from conftest import trace_decisions, tune_context
from tlp._tvm import ms
from tlp.search.search_strategy.library import LibraryError, ScheduleLibrary, extent_distance
from tlp.search.search_strategy.transfer import replayed_candidates


def test_extent_distance_needs_the_same_blocks_and_grows_with_the_shape_gap():
    dense_64 = {"T_matmul_NT": [64, 64, 64], "root": []}
    dense_128 = {"T_matmul_NT": [64, 128, 64], "root": []}
    dense_512 = {"T_matmul_NT": [512, 512, 512], "root": []}
    assert extent_distance(dense_64, dense_64) == 0.0
    assert extent_distance(dense_64, dense_128) == pytest.approx(math.log(2))
    assert extent_distance(dense_64, dense_128) < extent_distance(dense_64, dense_512)
    assert extent_distance(dense_64, {"T_softmax_maxelem": [1, 1000], "root": []}) == math.inf
    assert extent_distance(dense_64, {"T_matmul_NT": [64, 64], "root": []}) == math.inf  # another loop nest
    assert extent_distance({"b": [-1, 8]}, {"b": [-1, 16]}) == pytest.approx(math.log(2))  # equal symbolic extents


@pytest.fixture(scope="module")
def dense_256(host_platform):
    from tlp.workloads import load_tasks

    return load_tasks(["dense_256x256x256"], host_platform.target)[0]


def _stored(dataset, platform_id):
    """(workload key, latency) of every valid stored program, fastest first."""
    store = dataset.store(platform_id)
    return sorted(((p.workload_key, p.latency) for p in store.latest_programs().values() if p.latency),
                  key=lambda pair: pair[1])


def test_a_dense_task_gets_the_stored_dense_workloads_fastest_programs_replayed(collected, host_platform, dense_256):
    """The tiny collection holds a 64³ dense and a softmax: a 256³ dense's nearest workload is the dense (the
    softmax has other blocks), its records are that dense's two fastest programs, and they replay on the 256³ loops."""
    dataset, _ = collected
    library = ScheduleLibrary.from_dataset(dataset, host_platform.id, per_workload=2)
    assert len(library) == 2  # both collected workloads
    nearest = library.nearest(dense_256.mod, 4)
    assert len(nearest) == 1 and "T_matmul_NT" in nearest[0][1].extents  # the softmax is never a source
    dense_key = nearest[0][1].key
    fastest = [latency for key, latency in _stored(dataset, host_platform.id) if key == dense_key][:2]
    assert [latency for latency, _, _ in nearest[0][1].programs] == fastest
    records = library.records_for(dense_256.mod)
    assert len(records) == 2
    replayed = replayed_candidates(records, tune_context(dense_256, host_platform.target))
    assert replayed  # (two programs may refit to one: then one candidate)
    for candidate in replayed:
        tiles = [[int(d) for d in decision] for inst, decision in candidate.sch.trace.decisions.items()
                 if inst.kind.name == "SamplePerfectTile"]
        assert tiles and all(math.prod(t) == 256 for t in tiles)  # refitted to the new loops


def test_excluded_networks_are_left_out_and_a_misspelt_one_is_an_error(collected, host_platform):
    dataset, _ = collected
    networks = {n for entry in dataset.catalogue().values() for n in entry.get("networks", {})}
    with pytest.raises(LibraryError, match="no valid program"):
        ScheduleLibrary.from_dataset(dataset, host_platform.id, exclude_networks=networks)
    with pytest.raises(LibraryError, match="no network resnet_5O in the task catalogue"):
        ScheduleLibrary.from_dataset(dataset, host_platform.id, exclude_networks=["resnet_5O"])
    with pytest.raises(LibraryError, match="per_workload must be between 1 and 4"):
        ScheduleLibrary.from_dataset(dataset, host_platform.id, per_workload=0)


def test_tuning_with_a_library_measures_its_replayed_program_in_the_first_round(collected, tmp_path, host_platform,
                                                                                 dense_256, fast_measure):
    """``tlp tune --first-round-trials 2 --first-round-transferred 1 --transfer-from D``: with a random model (whose
    pick among the replayed programs is any of them) one of the first two measured programs is a replayed one."""
    from tlp.tune.sources import Tunable
    from tlp.tune.run import TuneConfig, tune

    dataset, _ = collected
    work_dir = tmp_path / "library"
    config = TuneConfig(trials=2, trials_per_iter=4, first_round_trials=2, first_round_transferred=1,
                        transfer_from=str(dataset.path), cost_model="random", population=16, compile=False,
                        measure=fast_measure)
    report = tune(Tunable("dense-256", [dense_256]), host_platform.target, work_dir, config)
    assert report["trials"] == 2
    assert report["transfer_library"]["workloads"] == 2 and report["transfer_library"]["skipped"] == {}
    measured = ms.database.JSONDatabase(work_dir=str(work_dir), module_equality="structural").get_all_tuning_records()
    library = ScheduleLibrary.from_dataset(dataset, host_platform.id)
    replayed = replayed_candidates(library.records_for(dense_256.mod), tune_context(dense_256, host_platform.target))
    replayed_decisions = [trace_decisions(c.sch.trace) for c in replayed]
    assert any(trace_decisions(record.trace) in replayed_decisions for record in measured)


def test_a_first_round_the_library_fills_is_its_replayed_programs_without_a_search(collected, tmp_path, host_platform,
                                                                                  dense_256, fast_measure):
    """``first_round_transferred`` = ``first_round_trials``: every first-round place is a replayed program (the
    evolutionary search runs from the second batch on)."""
    from tlp.tune.sources import Tunable
    from tlp.tune.run import TuneConfig, tune

    dataset, _ = collected
    work_dir = tmp_path / "library"
    config = TuneConfig(trials=2, trials_per_iter=4, first_round_trials=2, first_round_transferred=2,
                        transfer_from=str(dataset.path), population=16, compile=False, measure=fast_measure)
    report = tune(Tunable("dense-256", [dense_256]), host_platform.target, work_dir, config)
    assert report["trials"] == 2
    measured = ms.database.JSONDatabase(work_dir=str(work_dir), module_equality="structural").get_all_tuning_records()
    library = ScheduleLibrary.from_dataset(dataset, host_platform.id)
    replayed = replayed_candidates(library.records_for(dense_256.mod), tune_context(dense_256, host_platform.target))
    replayed_decisions = [trace_decisions(c.sch.trace) for c in replayed]
    assert len(measured) == 2 and all(trace_decisions(r.trace) in replayed_decisions for r in measured)
    assert report["candidates_scored"] == len(replayed)  # the library's programs only: no population was drawn


def test_where_the_nearest_stored_workload_is_far_one_first_round_place_stays_the_models_evolved_pick(
        collected, tmp_path, host_platform, dense_256, fast_measure, monkeypatch):
    """The same run with the 64³ dense counted as far from the 256³ one: the evolutionary search runs for the first
    round and one of its two places is a replayed program, the other the search's."""
    from tlp.search.search_strategy import first_round
    from tlp.tune.sources import Tunable
    from tlp.tune.run import TuneConfig, tune

    dataset, _ = collected
    library = ScheduleLibrary.from_dataset(dataset, host_platform.id)
    distance = library.nearest(dense_256.mod, 1)[0][0]
    assert distance < first_round.FAR_LIBRARY_DISTANCE  # near by default: the test above fills the round
    monkeypatch.setattr(first_round, "FAR_LIBRARY_DISTANCE", distance / 2)
    work_dir = tmp_path / "far"
    config = TuneConfig(trials=2, trials_per_iter=4, first_round_trials=2, first_round_transferred=2,
                        transfer_from=str(dataset.path), population=16, compile=False, measure=fast_measure)
    report = tune(Tunable("dense-256", [dense_256]), host_platform.target, work_dir, config)
    measured = ms.database.JSONDatabase(work_dir=str(work_dir), module_equality="structural").get_all_tuning_records()
    replayed = replayed_candidates(library.records_for(dense_256.mod), tune_context(dense_256, host_platform.target))
    replayed_decisions = [trace_decisions(c.sch.trace) for c in replayed]
    assert len(measured) == 2
    assert sum(trace_decisions(r.trace) in replayed_decisions for r in measured) == 1
    assert report["candidates_scored"] > len(replayed)  # a population was drawn and scored


def test_a_platform_the_dataset_lacks_draws_on_the_nearest_stored_platforms_library(collected, tmp_path,
                                                                                      host_platform, fast_measure):
    """Tuning for an SSE4.2 target (no platform of the collection) with the collection as library: the library is
    the host platform's, the one stored platform, said so in the report; a first round still measures."""
    from tlp.platform import Platform, parse_target
    from tlp.tune.run import TuneConfig, tune
    from tlp.tune.sources import Tunable
    from tlp.workloads import load_tasks

    dataset, _ = collected
    sse = parse_target({"kind": "llvm", "mcpu": "x86-64-v2", "num-cores": 2})
    assert dataset.nearest_platform_id(Platform.host(sse)) == (host_platform.id, False)
    assert dataset.nearest_platform_id(host_platform) == (host_platform.id, True)
    config = TuneConfig(trials=2, trials_per_iter=4, first_round_trials=2, first_round_transferred=1,
                        transfer_from=str(dataset.path), cost_model="random", population=16, compile=False,
                        measure=fast_measure)
    report = tune(Tunable("dense-256-sse", load_tasks(["dense_256x256x256"], sse)), sse, tmp_path / "sse", config)
    assert report["trials"] == 2
    assert report["transfer_library"]["platform"] == host_platform.id and not report["transfer_library"]["exact"]


def test_a_library_needs_transferred_places(collected, host_platform):
    from tlp import TLPError
    from tlp.search.presets import resolve
    from tlp.tune.run import TuneConfig

    dataset, _ = collected
    with pytest.raises(TLPError, match="set first_round_transferred"):
        resolve(TuneConfig(transfer_from=str(dataset.path), first_round_transferred=0), host_platform.target)


def _library_summary(library):
    return [(w.key, w.extents, [program[0] for program in w.programs]) for w in library.workloads]


def _fastest_by_reading_everything(store, per_workload=2):
    fastest = {}
    for program in store.latest_programs().values():
        if program.latency is not None:
            fastest.setdefault(program.workload_key, []).append(program.latency)
    return {key: sorted(latencies)[:per_workload] for key, latencies in fastest.items()}


def _fastest_from_index(store, per_workload=2):
    from tlp.dataset.best_programs import best_programs

    return {key: [p[0] for p in programs] for key, programs in best_programs(store).fastest(per_workload).items()}


def test_the_library_reads_the_index_made_at_seal_and_only_what_was_stored_after_it(collected, host_platform,
                                                                                   tmp_path, monkeypatch):
    """Finding each workload's fastest programs in the records means parsing every one of them (100,000: a minute
    and a half). A seal indexes them; a reader takes the index and reads only the segments and tails after it, so a
    program stored (or re-measured) since is seen before the next seal, and the next seal covers it."""
    import shutil

    from tlp.dataset import Dataset, MeasuredProgram
    from tlp.dataset.best_programs import INDEX_NAME, read_index

    dataset, _ = collected
    copy = Dataset(shutil.copytree(dataset.path, tmp_path / "copy"))
    store = copy.store(host_platform.id)
    assert (store.path / INDEX_NAME).exists()  # the collection sealed its segments, and indexed them
    assert _fastest_from_index(store) == _fastest_by_reading_everything(store)
    built = _library_summary(ScheduleLibrary.from_dataset(copy, host_platform.id))

    covered = read_index(store).covered
    read_segments = []
    original_lines = type(store.records).lines

    def lines(table, on_damage=None, skip_segments=()):
        read_segments.extend(s.name for s in table.segments() if s.name not in skip_segments)
        return original_lines(table, on_damage, skip_segments)

    monkeypatch.setattr(type(store.records), "lines", lines)
    assert _library_summary(ScheduleLibrary.from_dataset(copy, host_platform.id)) == built
    assert not set(read_segments) & {name for segments in covered.values() for name in segments}
    monkeypatch.undo()

    # A faster program of the slowest-kept workload and a slower re-measurement of the fastest program, unsealed.
    fastest = min(store.latest_programs().values(), key=lambda p: p.latency or float("inf"))
    other = next(p for p in store.latest_programs().values() if p.latency and p.workload_key != fastest.workload_key)
    faster = min(p.latency for p in store.latest_programs().values()
                 if p.latency and p.workload_key == other.workload_key) / 10  # than any stored program of its workload
    new = MeasuredProgram(other.workload_key, [other.trace_json[0], []], other.args_info, [faster] * 3,
                          meta={"foreign_load": 0.0})
    remeasured = MeasuredProgram(fastest.workload_key, fastest.trace_json, fastest.args_info, [1.0] * 3,
                                 meta={"foreign_load": 0.0})
    with store:
        store.append([new, remeasured])
    expected = _fastest_by_reading_everything(store)
    assert expected[other.workload_key][0] == pytest.approx(faster)
    assert fastest.latency not in expected[fastest.workload_key]
    assert _fastest_from_index(store) == expected
    with store:
        assert store.path / INDEX_NAME in store.seal()
    assert len(read_index(store).covered[store.records.tail.name]) == len(covered[store.records.tail.name]) + 1
    assert _fastest_from_index(store) == expected


def test_an_unusable_index_means_reading_the_whole_store_never_an_error(collected, host_platform, tmp_path):
    import shutil

    from tlp.dataset import Dataset
    from tlp.dataset.best_programs import INDEX_NAME, read_index
    from tlp.dataset.verify import format_verification, verify_dataset

    dataset, _ = collected
    copy = Dataset(shutil.copytree(dataset.path, tmp_path / "copy"))
    store = copy.store(host_platform.id)
    expected = _fastest_by_reading_everything(store)
    index = store.path / INDEX_NAME
    index.write_bytes(b"not an xz file")  # damaged
    assert read_index(store) is None and _fastest_from_index(store) == expected
    verified = verify_dataset(copy)
    assert verified["clean"] and verified["indexes"] == {host_platform.id: "missing"}  # slower reads, no damage
    assert "tlp dataset seal" in format_verification(verified)
    with store:
        store.seal()  # nothing to seal: the index is made again
    assert read_index(store) is not None and verify_dataset(copy)["indexes"] == {host_platform.id: "current"}
    # A covered segment that is not the one indexed (restored from another branch, say): its checksum differs.
    manifest = store.records.manifest_path
    text = manifest.read_text()
    first = sorted(store.records.manifest())[0]
    sha = store.records.manifest()[first]["sha256"]
    manifest.write_text(text.replace(sha, "0" * len(sha)))
    from tlp.dataset.best_programs import _sealed, _usable

    assert not _usable(read_index(store), _sealed(store))
    manifest.write_text(text)
    assert _fastest_from_index(store) == expected
