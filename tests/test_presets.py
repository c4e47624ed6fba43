"""Presets: the search settings a user leaves out, resolved once in the library for `tlp tune` and `tune()` alike."""

import pytest

from conftest import tlp_cli


def _resolved(argv, target):
    """The settings `tlp tune dense_64x64x64 ARGV` runs with."""
    from tlp.cli import build_parser
    from tlp.cli.tune import tune_config
    from tlp.search.presets import resolve

    return resolve(tune_config(build_parser().parse_args(["tune", "dense_64x64x64", *argv])), target)


def _search_options(config):
    return (config.trials_per_iter, config.first_round_trials, config.population, config.max_per_structure,
            config.task_scheduler, config.online_steps, config.online_lr, config.online_min_task_measurements)


def test_the_tlp_preset_is_the_tlp_models_default_and_draws_on_a_checkouts_dataset_of_this_platform(
        collected, host_platform, tmp_path, monkeypatch):
    from tlp.search.presets import resolve
    from tlp.tune import TuneConfig

    dataset, _ = collected
    target = host_platform.target
    monkeypatch.chdir(tmp_path)  # no dataset here: both first-round places are the model's
    config = _resolved([], target)
    assert config.preset == "tlp" and _search_options(config) == (8, 2, 256, 2, "headroom", 5, 1e-3, 3)
    assert (config.first_round_transferred, config.transfer_from) == (0, None)
    assert resolve(TuneConfig(), target) == config  # Python's TuneConfig() runs what the command line runs

    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "tlp-cpu").symlink_to(dataset.path)  # a checkout's dataset holding this platform
    config = _resolved([], target)
    assert (config.first_round_transferred, config.transfer_from) == (2, "datasets/tlp-cpu")  # the whole round
    assert resolve(TuneConfig(), target) == config
    unheld = {"kind": "llvm", "mcpu": "x86-64-v2", "num-cores": 2}  # a CPU the dataset lacks: its nearest platform's
    assert (resolve(TuneConfig(), unheld).first_round_transferred, resolve(TuneConfig(), unheld).transfer_from) == \
        (1, "datasets/tlp-cpu")  # another CPU's programs: one place, beside the model's pick
    assert _resolved(["--set", "first_round_trials=1"], target).first_round_transferred == 1  # a round of one
    assert _resolved(["--set", "first_round_trials=4"], target).first_round_transferred == 2  # 2 of 4: 2 evolved

    config = _resolved(["--set", "population=64", "--set", "online_steps=0", "--set", "task_scheduler=gradient"],
                       target)
    assert _search_options(config) == (8, 2, 64, 2, "gradient", 0, 1e-3, 3)  # the user's settings win
    renamed = _resolved(["--population", "64", "--online-steps", "0", "--task-scheduler", "gradient"], target)
    assert renamed == config  # the old options, for one release
    for no_library in (["--set", "first_round_trials=8"], ["--set", "transfer_from=none"]):
        config = _resolved(no_library, target)
        assert (config.first_round_transferred, config.transfer_from) == (0, None), no_library


def test_the_other_cost_models_get_metaschedules_own_search(host_platform):
    metaschedule = (32, None, 2048, 0, "gradient", 0, 1e-4, 0)
    for argv in (["--cost-model", "xgb"], ["--cost-model", "random"], ["--preset", "metaschedule"]):
        config = _resolved(argv, host_platform.target)
        assert config.preset == "metaschedule" and _search_options(config) == metaschedule, argv
        assert (config.first_round_transferred, config.transfer_from) == (0, None)
    config = _resolved(["--cost-model", "xgb", "--preset", "tlp"], host_platform.target)
    assert config.preset == "tlp" and _search_options(config)[:5] == (8, 2, 256, 2, "headroom")


@pytest.mark.parametrize("argv, message", [
    (["--set", "nosuch=1"], "--set nosuch: no such setting"),
    (["--set", "population"], "--set takes KEY=VALUE"),
    (["--set", "trials_per_iter=eight"], "--set trials_per_iter=eight: not an integer"),
    (["--set", "trials=5"], "--set trials: no such setting"),  # it has its own option
    (["--trials", "0"], "trials must be at least 1"),
    (["--trials", "-5"], "trials must be at least 1"),
    (["--top-tasks", "0"], "top_tasks must be at least 1"),
    (["--set", "task_scheduler=fastest"], "unknown task_scheduler 'fastest'"),
    (["--set", "first_round_transferred=1", "--set", "transfer_from=none"], "first_round_transferred places replay"),
])
def test_settings_that_cannot_work_are_one_line_errors_before_anything_runs(argv, message, tmp_path):
    run = tlp_cli(["tune", "dense_64x64x64", "--work-dir", str(tmp_path / "w"), *argv])
    assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert not (tmp_path / "w").exists()  # nothing created


def test_tune_with_the_default_preset_measures_a_library_program_and_says_so(collected, tiny_checkpoint, tmp_path,
                                                                             monkeypatch):
    """``tlp tune OP`` in a checkout whose dataset holds this platform: the report names the preset and the library
    its first round drew on, and the search ran with the preset's batches."""
    import json

    from tlp.tune.report import format_report

    dataset, _ = collected
    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "tlp-cpu").symlink_to(dataset.path)
    monkeypatch.chdir(tmp_path)
    run = tlp_cli(["tune", "dense_256x256x256", "--model", str(tiny_checkpoint), "--trials", "3",
                   "--work-dir", str(tmp_path / "w"), "--json"])
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["preset"] == "tlp" and report["trials"] == 3
    assert report["config"]["trials_per_iter"] == 8 and report["config"]["first_round_transferred"] == 2
    assert report["transfer_library"]["dataset"] == "datasets/tlp-cpu" and report["transfer_library"]["workloads"] == 2
    text = format_report(report)
    assert "preset tlp" in text and "schedule library: datasets/tlp-cpu (2 workloads" in text
    assert "): 2 first-round places per task (one where it holds no near workload)" in text
