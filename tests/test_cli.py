"""The command line as a user runs it: exit codes, messages, JSON output."""

import json
import subprocess

from conftest import TLP, tlp_cli


def run(*args):
    return tlp_cli(list(args))


def test_unknown_workload_exits_2_with_message(tmp_path):
    # As a user runs it: a process of its own (the other tests run the command line in this one).
    result = subprocess.run(TLP + ["collect", "--workloads", "resnet51", "--dataset", str(tmp_path)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 2
    assert "unknown workload 'resnet51'" in result.stderr
    assert not list(tmp_path.iterdir())  # nothing created


def test_old_style_target_is_rejected(tmp_path):
    result = run("collect", "--workloads", "dense_64x64x64", "--target", "llvm -mcpu=znver3",
                 "--dataset", str(tmp_path))
    assert result.returncode == 2 and "JSON" in result.stderr


def test_rpc_tracker_down_exits_2(tmp_path):
    result = run("collect", "--workloads", "dense_64x64x64", "--dataset", str(tmp_path), "--target",
                 '{"kind": "llvm", "mcpu": "znver3", "num-cores": 2}', "--rpc-tracker", "127.0.0.1:1", "--rpc-key", "x")
    assert result.returncode == 2 and "not reachable" in result.stderr
    # the remote machine's core count is unknown here: an RPC target must say it (MetaSchedule needs it)
    no_cores = run("collect", "--workloads", "dense_64x64x64", "--dataset", str(tmp_path), "--target",
                   '{"kind": "llvm", "mcpu": "znver3"}', "--rpc-tracker", "127.0.0.1:1", "--rpc-key", "x")
    assert no_cores.returncode == 2 and 'no "num-cores"' in no_cores.stderr


def test_dataset_info_json_and_text(tmp_path):
    result = run("collect", "--workloads", "softmax_1x1000", "--dataset", str(tmp_path), "--trials-per-task", "4",
                 "--set", "batch_size=4", "--set", "min_repeat_ms=2", "-q")
    assert result.returncode == 0, result.stderr
    info = json.loads(run("dataset", "info", str(tmp_path), "--json").stdout)
    for field in ["platforms", "tasks", "networks", "records", "valid_records", "failed_records", "noise_cv_median"]:
        assert field in info
    assert info["records"] == 4 and info["tasks"] == 1
    text = run("dataset", "info", str(tmp_path)).stdout
    assert "records 4" in text and "noise" in text


def test_dataset_info_on_missing_folder(tmp_path):
    result = run("dataset", "info", str(tmp_path / "nope"))
    assert result.returncode == 2 and "no such dataset folder" in result.stderr


def test_workloads_list_without_extraction():
    result = run("workloads", "list", "--no-count", "--json")
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["resnet50"]["split"] == "test" and rows["conv2d_nchw"]["kind"] == "operators"


def test_train_writes_a_self_describing_checkpoint(collected, tmp_path):
    dataset, _ = collected
    out = tmp_path / "model.pt"
    result = run("train", str(dataset.path), "--out", str(out), "--epochs", "2", "--set", "hidden=16", "-q",
                 "--set", "loss=soft-listwise+slowdown", "--set", "patience=5")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["train_tasks"] >= 1 and out.exists()
    from tlp.model.estimator import TLPModel

    model = TLPModel.load(out)
    meta = model.meta
    assert meta["platforms"] and meta["dataset_hash"] and "resnet50" in meta["held_out_networks"]
    # online fine-tuning reuses the checkpoint's loss
    assert model.train_config.loss == "soft-listwise+slowdown" and model.train_config.patience == 5

    # A student distilled from it (one teacher here; users pass several seeds) says where its targets came from;
    # with the slowdown term (which reads the measured latencies, not the targets).
    student = tmp_path / "student.pt"
    result = run("train", str(dataset.path), "--out", str(student), "--epochs", "1", "--set", "hidden=16", "-q",
                 "--set", "loss=soft-listwise+slowdown", "--distil-from", str(out), "--set", "distil_alpha=0.25", "--set", "transfer_shapes=2",
                 "--set", "arch=lstm", "--set", "layers=1")
    assert result.returncode == 0, result.stderr
    assert TLPModel.load(student).net.lstm.num_layers == 1  # the student's own architecture, not the teacher's
    assert TLPModel.load(student).meta["distilled_from"] == {"teachers": [str(out)], "alpha": 0.25,
                                                             "transfer_shapes": 2}
    assert json.loads(result.stdout)["train_tasks"] == summary["train_tasks"] + 2  # the two new shapes trained too
    result = run("train", str(dataset.path), "--out", str(tmp_path / "no.pt"), "--epochs", "1", "--set", "hidden=16",
                 "-q", "--distil-from", str(out))  # the default loss, lambdarank, is pairwise
    assert result.returncode == 2 and "listwise loss" in result.stderr and not (tmp_path / "no.pt").exists()


def test_train_refuses_an_empty_dataset(tmp_path):
    result = run("train", str(tmp_path), "--out", str(tmp_path / "m.pt"))
    assert result.returncode == 2 and "no platform stored here yet" in result.stderr


def test_train_refuses_distil_alpha_without_teachers(tmp_path):
    result = run("train", str(tmp_path), "--out", str(tmp_path / "m.pt"), "--set", "distil_alpha=0.5")
    assert result.returncode == 2 and "--distil-from" in result.stderr
    result = run("train", str(tmp_path), "--out", str(tmp_path / "m.pt"), "--set", "transfer_shapes=10")
    assert result.returncode == 2 and "transfer_shapes needs teachers" in result.stderr


def test_train_settings_name_the_choices_before_any_data_is_read(tmp_path):
    from tlp.model.losses import LOSSES
    from tlp.model.network import ARCHS

    bad_loss = run("train", str(tmp_path), "--out", str(tmp_path / "m.pt"), "--set", "loss=mse")
    assert bad_loss.returncode == 2 and all(loss in bad_loss.stderr for loss in LOSSES), bad_loss.stderr
    bad_arch = run("train", str(tmp_path), "--out", str(tmp_path / "m.pt"), "--set", "arch=transformer")
    assert bad_arch.returncode == 2 and all(arch in bad_arch.stderr for arch in ARCHS), bad_arch.stderr
