"""A user's own MetaSchedule tuning logs become a dataset."""

import pytest

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
