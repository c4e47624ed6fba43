"""``tlp tune --preset``: the search options a user leaves out, the TLP model's best setting by default."""

from conftest import tlp_cli


def _tune_args(argv, target):
    from tlp.cli import _apply_tune_preset, build_parser

    args = build_parser().parse_args(["tune", "dense_64x64x64", *argv])
    return args, _apply_tune_preset(args, target)


def _search_options(args):
    return (args.trials_per_iter, args.first_round_trials, args.population, args.max_per_structure,
            args.task_scheduler, args.online_steps, args.online_lr, args.online_min_task_measurements)


def test_the_tlp_preset_is_the_tlp_models_default_and_draws_on_a_checkouts_dataset_of_this_platform(
        collected, host_platform, tmp_path, monkeypatch):
    dataset, _ = collected
    target = host_platform.target
    monkeypatch.chdir(tmp_path)  # no dataset here: both first-round places are the model's
    args, name = _tune_args([], target)
    assert name == "tlp" and _search_options(args) == (8, 2, 256, 2, "headroom", 5, 1e-3, 3)
    assert (args.first_round_transferred, args.transfer_from) == (0, None)

    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "tlp-cpu").symlink_to(dataset.path)  # a checkout's dataset holding this platform
    args, _ = _tune_args([], target)
    assert (args.first_round_transferred, args.transfer_from) == (1, "datasets/tlp-cpu")

    args, _ = _tune_args(["--population", "64", "--online-steps", "0", "--task-scheduler", "gradient"], target)
    assert _search_options(args) == (8, 2, 64, 2, "gradient", 0, 1e-3, 3)  # the user's options win
    for no_library in (["--first-round-trials", "8"], ["--transfer-from", "none"], ["--first-round-member-picks", "1"]):
        args, _ = _tune_args(no_library, target)
        assert (args.first_round_transferred, args.transfer_from) == (0, None), no_library


def test_the_other_cost_models_get_metaschedules_own_search(host_platform):
    metaschedule = (32, None, 2048, 0, "gradient", 0, 1e-4, 0)
    for argv in (["--cost-model", "xgb"], ["--cost-model", "random"], ["--preset", "metaschedule"]):
        args, name = _tune_args(argv, host_platform.target)
        assert name == "metaschedule" and _search_options(args) == metaschedule, argv
        assert (args.first_round_transferred, args.transfer_from) == (0, None)
    args, name = _tune_args(["--cost-model", "xgb", "--preset", "tlp"], host_platform.target)
    assert name == "tlp" and _search_options(args)[:5] == (8, 2, 256, 2, "headroom")


def test_tune_with_the_default_preset_measures_a_library_program_and_says_so(collected, tiny_checkpoint, tmp_path,
                                                                             monkeypatch):
    """``tlp tune OP`` in a checkout whose dataset holds this platform: the report names the preset and the library
    its first round drew on, and the search ran with the preset's batches."""
    import json

    from tlp.search.report import format_report

    dataset, _ = collected
    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "tlp-cpu").symlink_to(dataset.path)
    monkeypatch.chdir(tmp_path)
    run = tlp_cli(["tune", "dense_256x256x256", "--model", str(tiny_checkpoint), "--trials", "3",
                   "--work-dir", str(tmp_path / "w"), "--json"])
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["preset"] == "tlp" and report["trials"] == 3
    assert report["config"]["trials_per_iter"] == 8 and report["config"]["first_round_transferred"] == 1
    assert report["transfer_library"]["dataset"] == "datasets/tlp-cpu" and report["transfer_library"]["workloads"] == 2
    text = format_report(report)
    assert "preset tlp" in text and "schedule library: datasets/tlp-cpu (2 workloads" in text
