"""A user's own MetaSchedule tuning logs become a dataset."""

import errno
import json
import shutil
from pathlib import Path

import pytest

from conftest import tlp_cli
from tlp._tvm import ms
from tlp.dataset import Dataset, DatasetError
from tlp.dataset.importer import import_work_dir


@pytest.fixture(scope="module")
def tuned_work_dir(tmp_path_factory, tiny_tasks, host_platform):
    """A real tune_tir run (MetaSchedule's own loop, XGB model), as a user would have."""
    from tlp._tvm import build_for_measurement, unnamed_log_handlers_set_aside

    work_dir = tmp_path_factory.mktemp("ms_work")
    # One round of 4 trials: what the tests read (records, workloads, latencies) is all there after one round.
    with unnamed_log_handlers_set_aside():  # a test's capture handlers, left on MetaSchedule's logger by a tune run
        ms.tune_tir(tiny_tasks[0].mod, host_platform.target, str(work_dir), max_trials_global=4,
                    num_trials_per_iter=4, builder=ms.builder.LocalBuilder(f_build=build_for_measurement),
                    runner=ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(repeat=3)))
    return work_dir


def test_import_is_complete_and_idempotent(tuned_work_dir, tmp_path, tiny_tasks, host_platform):
    dataset = Dataset(tmp_path)
    summary = import_work_dir(dataset, tuned_work_dir, network="my_model", hardware=host_platform.hardware)
    assert summary.imported == 4 and summary.workloads == 1
    assert summary.platform == host_platform.id  # same target + same machine = same platform as our collections
    store = dataset.store(summary.platform)
    programs = list(store.iter_programs())
    assert {p.workload_key for p in programs} == {tiny_tasks[0].key}
    assert sum(p.latency is not None for p in programs) >= 3
    assert dataset.catalogue()[tiny_tasks[0].key]["networks"] == {"my_model": 1}
    again = import_work_dir(dataset, tuned_work_dir, network="my_model", hardware=host_platform.hardware)
    assert again.imported == 0 and again.already_present == 4


def test_import_without_hardware_is_its_own_platform(tuned_work_dir, tmp_path, host_platform):
    summary = import_work_dir(Dataset(tmp_path), tuned_work_dir)
    assert summary.platform != host_platform.id  # unknown machine: never mixed with ours silently


def test_corrupt_lines_are_skipped_and_counted(tuned_work_dir, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "database_workload.json").write_text((tuned_work_dir / "database_workload.json").read_text())
    records = (tuned_work_dir / "database_tuning_record.json").read_text().splitlines()
    records.insert(2, '[0, [["truncated')
    records.insert(3, '[0, [[[], []], ["fast"], {"kind": "llvm"}, []]]')
    (broken / "database_tuning_record.json").write_text("\n".join(records) + "\n")
    summary = import_work_dir(Dataset(tmp_path / "ds"), broken)
    assert summary.imported == 4
    assert summary.skipped == {"corrupt tuning record line": 1, "run_secs is not a list of numbers": 1}
    assert "database_tuning_record.json:3" in summary.examples[0]


def test_not_a_work_dir_is_a_clear_error(tmp_path):
    with pytest.raises(DatasetError, match="not a MetaSchedule work directory"):
        import_work_dir(Dataset(tmp_path / "ds"), tmp_path)


def test_a_guessed_catalogue_entry_never_overrides_a_known_task(tuned_work_dir, tmp_path, tiny_tasks, host_platform):
    """A log's workloads are catalogued by guess (function name, weight 1) only when the dataset does not know them:
    a task another platform collected keeps its name, networks and weight."""
    dataset = Dataset(tmp_path)
    key = tiny_tasks[0].key
    dataset.register_tasks([(key, "the_real_name", "bert_tiny", 2, 1.0)])
    import_work_dir(dataset, tuned_work_dir, network="my_folder", hardware=host_platform.hardware)
    assert dataset.catalogue()[key]["name"] == "the_real_name"
    assert dataset.catalogue()[key]["networks"] == {"bert_tiny": 2}


class _FullDisk:
    """A file object that writes half of what it is given, then fails as a full disk does."""

    def __init__(self, handle):
        self.handle = handle

    def write(self, data):
        self.handle.write(data[: len(data) // 2])
        self.handle.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()


def _disk_full_at(monkeypatch, name):
    """Writes of dataset files called ``name`` (a table tail, or a segment, through its temporary file) fail
    midway."""
    import builtins

    from tlp.dataset import table

    real_open = builtins.open

    def full_open(path, mode="r", *args, **kwargs):
        handle = real_open(path, mode, *args, **kwargs)
        written = ("a" in mode or "w" in mode) and Path(path).name in (name, name + ".tmp")
        return _FullDisk(handle) if written else handle

    monkeypatch.setattr(table, "open", full_open, raising=False)


def _files(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(Path(folder).rglob("*"))
            if p.is_file() and not p.name.endswith(".lock")}


@pytest.mark.parametrize("where", ["new platform", "existing platform"])
def test_a_full_disk_is_one_line_naming_the_file_and_nothing_is_half_written(tuned_work_dir, tmp_path, collected,
                                                                           host_platform, monkeypatch, where):
    # `tlp dataset import` on a full disk died with an OSError traceback and left a platform folder behind that
    # `verify` called fine; the records' metadata failing after the records themselves is the worst place.
    dataset_path = tmp_path / "ds"
    if where == "existing platform":  # the host platform holds a collection already: none of it may change
        shutil.copytree(collected[0].path, dataset_path)
    before = _files(dataset_path) if dataset_path.exists() else {}
    _disk_full_at(monkeypatch, "measurements.jsonl")
    result = tlp_cli(["dataset", "import", str(tuned_work_dir), "--dataset", str(dataset_path), "--measured-here"])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    error = result.stderr.strip()
    assert "\n" not in error and "measurements.jsonl: No space left on device" in error and "free some space" in error
    assert {k: v for k, v in _files(dataset_path).items() if k != "tasks.json"} == \
        {k: v for k, v in before.items() if k != "tasks.json"}  # no half-made platform, nothing stored lost
    assert Dataset(dataset_path).platform_ids() == ([host_platform.id] if where == "existing platform" else [])
    assert tlp_cli(["dataset", "verify", str(dataset_path)]).returncode == 0
    monkeypatch.undo()  # space again: the same command imports everything
    again = tlp_cli(["dataset", "import", str(tuned_work_dir), "--dataset", str(dataset_path), "--measured-here"])
    assert again.returncode == 0 and json.loads(again.stdout)["imported"] == 4


def test_a_full_disk_while_sealing_keeps_every_record_in_the_tail(tuned_work_dir, tmp_path, host_platform,
                                                                  monkeypatch):
    dataset = Dataset(tmp_path / "ds")
    _disk_full_at(monkeypatch, "database_tuning_record.json.0001.xz")
    with pytest.raises(DatasetError, match=r"database_tuning_record\.json\.0001\.xz: No space left on device"):
        import_work_dir(dataset, tuned_work_dir, hardware=host_platform.hardware)
    assert not list(dataset.path.rglob("*.tmp"))  # the half-written segment is gone
    store = dataset.store(dataset.platform_ids()[0])
    assert len(list(store.iter_programs())) == 4  # all in the plain tail
    monkeypatch.undo()
    with store:
        assert store.seal()  # the next writer seals them
    assert len(list(store.iter_programs())) == 4


def test_an_import_where_nothing_is_usable_exits_nonzero(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "database_workload.json").write_text("{not a workload\n")
    (work / "database_tuning_record.json").write_text('[0, [[[], []], [1e-3], {"kind": "llvm"}, []]]\n')
    result = tlp_cli(["dataset", "import", str(work), "--dataset", str(tmp_path / "ds")])
    assert result.returncode == 2 and "no usable tuning record" in result.stderr
    assert not (tmp_path / "ds").exists() or not Dataset(tmp_path / "ds").platform_ids()


def test_a_replayed_trace_has_the_hash_its_collection_measured(collected, host_platform):
    from tlp.dataset.importer import replayed_program_hash

    store = collected[0].store(host_platform.id)
    programs = [p for p in store.iter_programs() if p.meta.get("program_hash")][:8]
    assert programs
    for program in programs:
        assert replayed_program_hash(store.workload_json(program.workload_key), program) == program.meta["program_hash"]


def test_chunks_and_worker_processes_import_what_one_pass_does(tuned_work_dir, tmp_path, host_platform, monkeypatch):
    from tlp.dataset import importer

    def stored(dataset):
        store = dataset.store(dataset.platform_ids()[0])
        return sorted((p.id, p.meta["program_hash"], p.latency) for p in store.iter_programs())

    whole = Dataset(tmp_path / "whole")
    one_pass = import_work_dir(whole, tuned_work_dir, hardware=host_platform.hardware)
    monkeypatch.setattr(importer, "IMPORT_CHUNK", 3)  # the 4 records in two chunks
    monkeypatch.setattr(importer, "PARALLEL_REPLAYS_FROM", 1)  # replayed in spawned workers
    monkeypatch.setattr(importer.os, "cpu_count", lambda: 2)
    chunked = Dataset(tmp_path / "chunked")
    summary = import_work_dir(chunked, tuned_work_dir, hardware=host_platform.hardware)
    assert summary.imported == one_pass.imported == 4 and summary.workloads == one_pass.workloads
    assert stored(chunked) == stored(whole)
    again = import_work_dir(chunked, tuned_work_dir, hardware=host_platform.hardware)
    assert again.imported == 0 and again.already_present == 4


def test_a_stop_ends_the_worker_processes_at_once():
    # A SIGTERM during a parallel import or featurization raised KeyboardInterrupt, then waited for every worker's
    # part to finish (minutes of replays) before the command could exit.
    import time

    from tlp.interrupt import process_pool

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with process_pool(2) as pool:
            busy = pool.submit(time.sleep, 60)
            while not busy.running():
                time.sleep(0.05)
            raise KeyboardInterrupt
    assert time.monotonic() - started < 20
