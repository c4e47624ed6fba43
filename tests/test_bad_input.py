"""Bad input to any verb: one line naming the file or argument and what to do, exit 2, no traceback, nothing made.

Each case here was accepted (and measured or trained nothing, or the wrong thing), or ended in a traceback or a
misleading line, before it was refused up front. None of them builds, measures or trains anything."""

import pytest

from conftest import tlp_cli

CASES = {
    # where a dataset must already be
    "train, no such dataset": (["train", "{tmp}/none", "--out", "{tmp}/m.pt"], "{tmp}/none: no such dataset folder"),
    "train, empty dataset": (["train", "{tmp}/empty", "--out", "{tmp}/m.pt"], "no platform stored here yet"),
    "train, a file as dataset": (["train", "{tmp}/file", "--out", "{tmp}/m.pt"], "{tmp}/file: a file, not a dataset"),
    "eval, no such dataset": (["eval", "--model", "tlp-cpu", "--dataset", "{tmp}/none"], "no such dataset folder"),
    "features, no such dataset": (["features", "{tmp}/none"], "{tmp}/none: no such dataset folder"),
    "seal, no such dataset": (["dataset", "seal", "{tmp}/none"], "{tmp}/none: no such dataset folder"),
    "compare, no such dataset": (["dataset", "compare", "{tmp}/none"], "{tmp}/none: no such dataset folder"),
    "compare, empty dataset": (["dataset", "compare", "{tmp}/empty"], "no platform stored here yet"),
    "export, no such dataset": (["dataset", "export", "{tmp}/none", "--platform", "p", "--out", "{tmp}/x"],
                                "no such dataset folder"),
    # settings out of range (each used to be accepted)
    "compare, min programs 0": (["dataset", "compare", "{tmp}/empty", "--min-programs", "0"],
                                "--min-programs 0: a ranking needs at least 2"),
    "info, negative load": (["dataset", "info", "{tmp}/empty", "--load-threshold", "-3"], "between 0 and 1"),
    "collect, 0 trials": (["collect", "--workloads", "dense_64x64x64", "--dataset", "{tmp}/d", "--trials-per-task",
                           "0"], "trials_per_task must be at least 1, not 0"),
    "collect, batch 0": (["collect", "--workloads", "dense_64x64x64", "--dataset", "{tmp}/d", "--set",
                          "batch_size=0"], "batch_size must be at least 1, not 0"),
    "collect, fraction 2": (["collect", "--workloads", "dense_64x64x64", "--dataset", "{tmp}/d", "--set",
                             "random_fraction=2"], "random_fraction must be between 0 and 1"),
    "collect, a file as dataset": (["collect", "--workloads", "dense_64x64x64", "--dataset", "{tmp}/file"],
                                   "{tmp}/file: a file, not a dataset folder"),
    "tune, 0 repeats": (["tune", "dense_64x64x64", "--work-dir", "{tmp}/w", "--set", "measure.repeat=0"],
                        "measure settings: repeat must be at least 1, not 0"),
    "tune, a file as dataset": (["tune", "dense_64x64x64", "--work-dir", "{tmp}/w", "--dataset", "{tmp}/file"],
                                "{tmp}/file: a file, not a dataset folder"),
    "adapt, fraction 2": (["adapt", "--dataset", "{tmp}/empty", "--set", "fraction=2"],
                          "fraction must be between 0 and 1"),
    "train, 0 epochs": (["train", "{tmp}/none", "--out", "{tmp}/m.pt", "--epochs", "0"], "epochs must be at least 1"),
    "train, negative lr": (["train", "{tmp}/none", "--out", "{tmp}/m.pt", "--set", "lr=-1"], "lr must be at least"),
    "train, hidden vs heads": (["train", "{tmp}/none", "--out", "{tmp}/m.pt", "--set", "hidden=30"],
                               "hidden (30) must be a multiple of heads (8)"),
    "train, missing GPU": (["train", "{tmp}/none", "--out", "{tmp}/m.pt", "--device", "cuda:99"], "--device cuda:99"),
    # a checkpoint that cannot be written: said before minutes of training, not after
    "train, unwritable out": (["train", "{tmp}/none", "--out", "/proc/nope/m.pt"], "/proc/nope"),
    "train, out is a folder": (["train", "{tmp}/none", "--out", "{tmp}/empty"], "a folder; give the checkpoint's"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_naming_it(tmp_path, case):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("not a dataset")
    args, expected = CASES[case]
    result = tlp_cli([arg.replace("{tmp}", str(tmp_path)) for arg in args])
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("tlp: error: "), result.stderr
    assert expected.replace("{tmp}", str(tmp_path)) in lines[0]
    assert not (tmp_path / "d").exists() and not (tmp_path / "w").exists() and not (tmp_path / "m.pt").exists()
