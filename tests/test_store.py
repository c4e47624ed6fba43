import json
import math

import pytest

from tlp.dataset.info import dataset_info, latest_summaries
from tlp.dataset.store import Dataset, DatasetError, MeasuredProgram, PlatformStore, ReadReport, mean_latency
from tlp.platform import Platform

PLATFORM = Platform({"kind": "llvm", "mcpu": "test-cpu", "num-cores": 2}, {"cpu_model": "test"})
WORKLOAD = ["123", "ZmFrZQ=="]  # the store only needs the key; decoding happens where IR is needed


def program(n, run_secs, **meta):
    return MeasuredProgram("123", [[["GetSBlock", [], ["C", "main"], ["b0"]]], [[0, n]]], [], run_secs, None, meta)


def make_store(tmp_path):
    store = Dataset(tmp_path).store_for(PLATFORM)
    store.lock()
    store.add_workload(WORKLOAD)
    return store


def test_records_round_trip_with_metadata(tmp_path):
    store = make_store(tmp_path)
    store.append([program(1, [1e-3, 1.1e-3, 0.9e-3], foreign_load=0.0), program(2, None)])
    programs = list(store.iter_programs())
    assert [p.latency for p in programs] == [pytest.approx(1e-3), None]
    assert programs[0].noise_cv == pytest.approx(0.1)
    assert programs[0].meta["foreign_load"] == 0.0
    # the record file is MetaSchedule's format: [workload index, [trace, run_secs, target, args_info]]
    first = json.loads((tmp_path / PLATFORM.id / PlatformStore.RECORDS).read_text().splitlines()[0])
    assert first[0] == 0 and first[1][1] == [1e-3, 1.1e-3, 0.9e-3] and first[1][2]["mcpu"] == "test-cpu"


def test_one_rule_decides_what_a_valid_latency_is():
    assert mean_latency([1e-3, 3e-3]) == pytest.approx(2e-3)
    for bad in ([], None, [float("nan")], [float("inf")], [0.0], [2e-3, -1e-3], [1e10]):
        assert mean_latency(bad) is None, bad
    assert mean_latency([1e-3], error="build failed") is None  # an error wins over any numbers


def test_invalid_latencies_are_stored_as_failures_with_a_reason(tmp_path):
    store = make_store(tmp_path)
    store.append([program(1, [float("inf")]), program(2, [0.0])])
    programs = list(store.iter_programs())
    assert [p.latency for p in programs] == [None, None]
    assert all("invalid run_secs" in p.error for p in programs)


def test_bad_lines_are_counted_and_skipped(tmp_path):
    store = make_store(tmp_path)
    store.append([program(1, [1e-3])])
    with open(tmp_path / PLATFORM.id / PlatformStore.RECORDS, "a") as handle:
        handle.write("not json\n")
        handle.write(json.dumps([0, [[[], []], [float("nan")], {}, []]]) + "\n")
        handle.write(json.dumps([0, [[[], [1]], [-1.0], {}, []]]) + "\n")
        handle.write(json.dumps([7, [[[], [2]], [1e-3], {}, []]]) + "\n")
    report = ReadReport()
    programs = list(store.iter_programs(report))
    assert sum(p.latency is not None for p in programs) == 1
    assert report.skipped["corrupt tuning record line"] == 2  # "not json" and the unknown workload index 7
    assert report.skipped["latency is NaN, infinite, non-positive or a failure marker"] == 2
    assert all(p.latency is None or math.isfinite(p.latency) for p in programs)
    assert any(":2:" in e or ":2" in e.split(": ")[0] for e in report.examples)


def test_remeasurement_prefers_the_quiet_measurement(tmp_path):
    store = make_store(tmp_path)
    store.append([program(1, [2e-3], foreign_load=0.6)])
    store.append([program(1, [1e-3], foreign_load=0.01)])
    store.append([program(1, [5e-3], foreign_load=0.7)])
    latest = store.latest_programs()
    assert len(latest) == 1
    assert next(iter(latest.values())).latency == pytest.approx(1e-3)


def test_info_counts_the_measurement_the_store_prefers(tmp_path):
    store = make_store(tmp_path)
    store.append([program(1, [1e-3, 1.2e-3], foreign_load=0.0, source="random"), program(2, None, source="random")])
    store.append([program(1, [5e-3, 9e-3], foreign_load=0.7, source="remeasure"),
                  program(2, [2e-3, 2e-3], foreign_load=0.5, source="remeasure")])
    # info keeps summaries, not programs: the same measurement of each as the store's own rule picks
    summaries = latest_summaries(store)
    assert {i: s.latency for i, s in summaries.items()} == {i: p.latency for i, p in store.latest_programs().items()}
    mine = dataset_info(Dataset(tmp_path))["per_platform"][PLATFORM.id]
    assert mine["records"] == 2 and mine["measurements"] == 4 and mine["valid_records"] == 2
    # program 1 keeps its quiet timing; program 2's re-measurement is loaded, but valid beats its failure
    assert mine["loaded_records"] == 1
    assert mine["noise_cv_median_quiet"] == pytest.approx(math.sqrt(2e-8) / 1.1e-3)
    assert mine["noise_cv_median_loaded"] == 0.0
    assert mine["origins"]["sources"] == {"random": 2}  # re-measurements counted under their first origin


def test_one_writer_at_a_time(tmp_path):
    writer = make_store(tmp_path)
    with pytest.raises(DatasetError, match="being written by pid"):
        Dataset(tmp_path).store(PLATFORM.id).lock()
    writer.unlock()
    Dataset(tmp_path).store(PLATFORM.id).lock()


def test_corrupt_workload_table_stops_with_location(tmp_path):
    store = make_store(tmp_path)
    with open(tmp_path / PLATFORM.id / PlatformStore.WORKLOADS, "a") as handle:
        handle.write("garbage\n")
    fresh = Dataset(tmp_path).store(PLATFORM.id)
    with pytest.raises(DatasetError, match=r"database_workload.json:2: corrupt workload line"):
        fresh.workload_keys()
    del store


def test_missing_platform_is_a_clear_error(tmp_path):
    with pytest.raises(DatasetError, match="no platform 'nope'"):
        Dataset(tmp_path).store("nope")
