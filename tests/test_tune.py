"""`tlp tune` as a user runs it: sources (zoo, TVMScript, TE, PyTorch, ONNX), databases, resume, Ctrl-C, errors."""

import json
from pathlib import Path
import signal
import subprocess
import textwrap
import time

import pytest

from conftest import TLP, assert_clean_stop, assert_store_sealed_and_unlocked, tlp_cli, tlp_stopped_at
from tlp import StageError
from tlp._tvm import ms
from tlp.tune.sources import SourceError, resolve

TVMSCRIPT = '''
from tvm.script import tirx as T

@T.prim_func(s_tir=True)
def main(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32, 32), "float32"), C: T.Buffer((32, 32), "float32")):
    T.func_attr({"tirx.noalias": True})
    for i, j, k in T.grid(32, 32, 32):
        with T.sblock("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''

TE = '''
from tvm import te

def workload():
    a = te.placeholder((64, 64), name="a")
    b = te.compute((64, 64), lambda i, j: te.exp(a[i, j]) * 2.0, name="b")
    return [a, b]
'''

TORCH = '''
import torch

class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 16)
        self.out = torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.out(torch.relu(self.fc(x)))

torch.manual_seed(0)
model = Tiny()
example_inputs = (torch.randn(4, 32),)
'''


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_python_sources_resolve_to_tasks(tmp_path, host_platform):
    target = host_platform.target
    script = resolve(str(_write(tmp_path, "mm.py", TVMSCRIPT)), target)
    assert len(script.tasks) == 1 and not script.is_network and script.tasks[0].flops == 2 * 32 ** 3
    te_source = resolve(str(_write(tmp_path, "exp.py", TE)), target)
    assert len(te_source.tasks) == 1
    network = resolve(str(_write(tmp_path, "tiny.py", TORCH)), target)
    assert network.is_network and network.tasks and not network.params  # weight and bias bound as constants
    assert len(network.relax_mod["main"].params) == len(network.inputs)
    heaviest = max(network.tasks, key=lambda task: task.weight * task.flops)
    top = network.top_tasks(1)
    assert top.tasks == [heaviest] and top.name == "tiny-top1" and top.relax_mod is network.relax_mod
    assert network.top_tasks(len(network.tasks)) is network
    with pytest.raises(SourceError, match="must be positive"):
        network.top_tasks(0)
    with pytest.raises(SourceError, match="failed to import"):
        resolve(str(_write(tmp_path, "broken.py", "import not_a_module_anywhere")), target)
    with pytest.raises(SourceError, match="found no TVMScript"):
        resolve(str(_write(tmp_path, "empty.py", "x = 1")), target)
    with pytest.raises(SourceError, match="unknown workload"):
        resolve("no_such_network", target)


def test_onnx_sources(tmp_path, host_platform):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    def save(nodes, name, inputs, outputs, initializers=()):
        graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        onnx.save(model, str(tmp_path / name))
        return str(tmp_path / name)

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 4])
    w = helper.make_tensor("w", TensorProto.FLOAT, [16, 4], [0.1] * 64)
    good = save([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                "good.onnx", [x], [y], [w])
    tunable = resolve(good, host_platform.target)
    assert tunable.is_network and tunable.tasks and tunable.inputs[0].shape == (8, 16)
    bad = save([helper.make_node("NoSuchOp", ["x"], ["y"], domain="")], "bad.onnx", [x], [y])
    with pytest.raises(StageError, match="bad.onnx: ONNX import failed: .*NoSuchOp.*; try: "):
        resolve(bad, host_platform.target)
    (tmp_path / "junk.onnx").write_bytes(b"junk")
    with pytest.raises(SourceError, match="junk.onnx: not a readable ONNX model"):
        resolve(str(tmp_path / "junk.onnx"), host_platform.target)


def _tune(args):
    return tlp_cli(["tune"] + args)


def test_tune_an_operator_writes_database_kernel_curve_and_resumes(tmp_path, tiny_checkpoint):
    work = tmp_path / "work"
    common = ["softmax_1x1000", "--model", str(tiny_checkpoint), "--work-dir", str(work), "--set", "trials_per_iter=8",
              "--set", "population=64"]
    first = _tune(common + ["--trials", "8", "--json"])
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert report["trials"] == 8 and report["tasks"][0]["best_latency_s"] > 0
    assert (work / "database_tuning_record.json").exists() and (work / "curve.png").exists()
    assert report["compiled"] and report["compiled"][0].endswith(".so")
    assert report["candidates_scored"] >= 8 and report["cost_model_time_s"]["network"] > 0
    # resumed with the headroom task rule: it continues the task's batch history from history.jsonl
    again = _tune(common + ["--trials", "16", "--set", "task_scheduler=headroom", "--json"])
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["trials"] == 16  # continued: 8 stored + 8 new, not 16 new
    assert json.loads(again.stdout)["config"]["task_scheduler"] == "headroom"
    lines = (work / "database_tuning_record.json").read_text().splitlines()
    assert len(lines) == 16
    # run again when complete: nothing measured; the report keeps the search's wall time over both earlier runs
    searched = json.loads(again.stdout)["search_wall_s"]
    done = _tune(common + ["--trials", "16", "--json"])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["trials"] == 16 and json.loads(done.stdout)["search_wall_s"] == searched
    assert searched > json.loads(first.stdout)["search_wall_s"] > 0


def test_the_python_api_takes_a_plain_target_dict_as_tlp_tune_takes_its_json(tmp_path, tiny_checkpoint, host_platform):
    from tlp.platform import host_cpu_name
    from tlp.tune import TuneConfig, tune

    plain = {"kind": "llvm", "mcpu": host_cpu_name(), "num-cores": host_platform.target["num-cores"]}
    report = tune("softmax_1x1000", plain, tmp_path / "w", TuneConfig(
        trials=2, model_path=str(tiny_checkpoint), trials_per_iter=2, population=16, compile=False))
    # the same platform as `tlp tune --target` (TVM's exported form: keys, tag), not one of the dict's own hash
    assert report["cost_model_head"]["tuning_platform"] == host_platform.id
    from tlp.platform import Platform

    assert Platform.host(plain).id == host_platform.id  # also for a cost model made outside tune()


def test_history_wall_time_adds_up_over_resumed_runs(tmp_path):
    from tlp.tune.report import history_entries  # pylint: disable=import-outside-toplevel
    lines = [{"trials": 8, "wall_s": 13.3, "run": "a"}, {"trials": 16, "wall_s": 13.4, "run": "b"},
             {"trials": 24, "wall_s": 20.0, "run": "b"}]
    path = tmp_path / "history.jsonl"
    # a resumed run whose first batch reads more seconds than the last run's end (model loading) still adds up
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n{\"trials\": 3")  # last line cut by a kill
    assert [round(wall, 1) for _, wall in history_entries(path)] == [13.3, 26.7, 33.3]
    # histories written before runs were marked: the clock going back is the only sign of a resume
    path.write_text("\n".join(json.dumps({k: v for k, v in x.items() if k != "run"})
                              for x in [lines[0], {"trials": 16, "wall_s": 2.0}]))
    assert [round(wall, 1) for _, wall in history_entries(path)] == [13.3, 15.3]


def test_tune_a_pytorch_module_end_to_end(tmp_path, tiny_checkpoint):
    source = _write(tmp_path, "tiny.py", TORCH)
    done = _tune([str(source), "--model", str(tiny_checkpoint), "--work-dir", str(tmp_path / "w"), "--trials", "8",
                  "--set", "trials_per_iter=8", "--set", "population=64", "--json"])
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["end_to_end_s"] > 0 and report["torch_eager_s"] > 0 and report["speedup_vs_torch"] > 0
    assert (tmp_path / "w" / "compiled.so").exists()
    # torch.compile beside eager, and where the wall time went: every stage that ran, in seconds that add up
    assert report["torch_compile"]["skipped"] is None and report["torch_compile_s"] > 0
    assert report["speedup_vs_torch_compile"] == pytest.approx(report["torch_compile_s"] / report["end_to_end_s"])
    seconds = report["stages_s"]["seconds"]
    for stage in ("import", "export", "tasks", "cost_model", "search", "search_build", "search_run",
                  "search_cost_model", "compile", "torch_compile", "timing"):
        assert seconds[stage] > 0, stage
    assert seconds["numerics"] >= 0  # a two-layer MLP's check can take under a millisecond
    top = ("import", "cost_model", "compile_check", "schedule_library", "search", "dataset", "zero_measurement",
           "compile", "numerics", "torch_compile", "timing", "other")
    assert sum(seconds.get(stage, 0) for stage in top) == pytest.approx(report["wall_s"], abs=0.5)
    assert seconds["search_build"] + seconds["search_run"] + seconds["search_cost_model"] <= seconds["search"] + 0.01
    assert 0 < report["stages_s"]["outside_search_and_compile"] < 1
    from tlp.tune.report import format_report  # pylint: disable=import-outside-toplevel

    printed = format_report(report)
    assert "torch.compile, Inductor (" in printed and "wall time by stage (" in printed and "search " in printed
    off = _tune([str(source), "--work-dir", str(tmp_path / "w"), "--trials", "8", "--set", "torch_compile=false",
                 "--json"])  # the budget is spent: compiles and times only
    assert off.returncode == 0, off.stderr
    assert "torch_compile" not in json.loads(off.stdout) and "search" not in json.loads(off.stdout)["stages_s"]["seconds"]


def test_ctrl_c_stops_cleanly_and_keeps_the_database(tmp_path, tiny_checkpoint):
    work = tmp_path / "work"
    process = subprocess.Popen(TLP + ["tune", "dense_64x64x64", "--model", str(tiny_checkpoint), "--work-dir",
                                      str(work), "--trials", "200", "--set", "trials_per_iter=4", "--set", "population=64"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    history = work / "history.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and not (history.exists() and history.read_text().strip()):
        time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr  # as for every verb (it was 2, an error's code)
    assert "interrupted" in stderr and "re-run to continue" in stderr
    records = [json.loads(line) for line in (work / "database_tuning_record.json").read_text().splitlines()]
    assert 4 <= len(records) < 200  # the batches measured before Ctrl-C, each a complete JSON line
    report = json.loads((work / "report.json").read_text())
    assert report["interrupted"] and "compiled" not in report  # the re-run compiles; an interrupted one does not


@pytest.mark.slow  # ~40 s each on 2 busy cores
@pytest.mark.parametrize("point,nth", [("build", 2), ("run", 5), ("seal", 1)])
def test_sigterm_anywhere_stops_with_130_and_every_record_intact(tmp_path, point, nth):
    # `timeout N tlp tune` crashed in std::terminate ("Segfault encountered", exit 139) when its SIGTERM, raised as
    # KeyboardInterrupt, landed in Python code C++ was calling; a batch whose workers the signal killed was stored
    # as failures (MetaSchedule's 1e10 s marker), in the work directory and then in the dataset.
    from tlp.dataset.store import Dataset

    work, data = tmp_path / "work", tmp_path / "data"
    args = ["tune", "dense_64x64x64", "--work-dir", str(work), "--trials", "4" if point == "seal" else "40",
            "--set", "trials_per_iter=4", "--set", "population=64", "--dataset", str(data)]
    stopped = tlp_stopped_at(point, nth, args)
    assert_clean_stop(stopped)
    records = [json.loads(line) for line in (work / "database_tuning_record.json").read_text().splitlines()]
    assert records and all(run_secs and max(run_secs) < 1e9 for _, (_, run_secs, _, _) in records)
    report = json.loads((work / "report.json").read_text())
    assert report["interrupted"]
    platforms = Dataset(data).platform_ids()
    assert platforms  # every stored batch went to the dataset too, before the report
    for platform in platforms:
        store = Dataset(data).store(platform)
        assert_store_sealed_and_unlocked(store)
        assert all(p.latency is not None for p in store.iter_programs())


@pytest.mark.parametrize("point", ["import", "predict"])
def test_sigterm_outside_the_search_stops_with_130(tmp_path, point):
    # Outside the search TVM's C++ calls Python too (graph rewrites and passes while importing, the cost model in a
    # zero-measurement search): a SIGTERM raised there ended in std::terminate. Now it is taken between stages.
    source = _write(tmp_path, "tiny.py", TORCH)
    work = tmp_path / "work"
    stopped = tlp_stopped_at(point, 1, ["tune", str(source), "--work-dir", str(work), "--trials", "2", "--top-tasks",
                                        "1", "--set", "trials_per_iter=2", "--set", "population=32"])
    assert_clean_stop(stopped)
    if point == "import":
        assert not work.exists()  # stopped before anything was made
    else:
        report = json.loads((work / "report.json").read_text())
        assert report["interrupted"] and report["trials"] == 2 and "compiled" not in report


def test_a_stop_raised_inside_a_metaschedule_callback_stays_a_tune_interrupted():
    # The progress callback raises TuneInterrupted after a requested stop, inside C++'s call into Python; unregistered
    # it came back as RuntimeError, and tune() had to catch every exception to tell the two apart.
    from tvm.ir.utils import derived_object

    from tlp.tune.run import TuneInterrupted

    @derived_object
    class StoppingBuilder(ms.builder.PyBuilder):
        def build(self, build_inputs):
            raise TuneInterrupted("interrupted")

    with pytest.raises(TuneInterrupted, match="interrupted"):
        StoppingBuilder().build([])


def test_tune_bad_input_is_a_clear_error(tmp_path, tiny_checkpoint):
    old_target = _tune(["dense_64x64x64", "--target", "llvm -mcpu=znver3"])
    assert old_target.returncode == 2 and "JSON" in old_target.stderr
    work = tmp_path / "w"
    work.mkdir()
    (work / "target.json").write_text(json.dumps({"kind": "llvm", "mcpu": "cortex-a72", "num-cores": 4}))
    other = _tune(["dense_64x64x64", "--model", str(tiny_checkpoint), "--work-dir", str(work)])
    assert other.returncode == 2 and "cortex-a72" in other.stderr and "another --work-dir" in other.stderr
    (tmp_path / "bad.pt").write_bytes(b"junk")
    bad_model = _tune(["dense_64x64x64", "--model", str(tmp_path / "bad.pt"), "--work-dir", str(tmp_path / "x")])
    assert bad_model.returncode == 2 and "not a TLP checkpoint" in bad_model.stderr
    assert not (tmp_path / "x").exists()  # the model loads before the work dir is made: nothing left behind
    assert "tune:" not in bad_model.stderr  # nor a progress bar started
    no_first_round = _tune(["dense_64x64x64", "--set", "first_round_trials=0"])
    assert no_first_round.returncode == 2 and "first_round_trials must be at least 1" in no_first_round.stderr
    negative_cap = _tune(["dense_64x64x64", "--set", "max_per_structure=-1"])
    assert negative_cap.returncode == 2 and "max_per_structure must be at least 1" in negative_cap.stderr
    # (MetaSchedule's full first batch: the tlp preset's first round of 2 has places to transfer to)
    transfer_alone = _tune(["dense_64x64x64", "--set", "first_round_transferred=1", "--set", f"transfer_from={tmp_path}",
                            "--preset", "metaschedule"])
    assert transfer_alone.returncode == 2 and "set first_round_trials at least 1" in transfer_alone.stderr
    library_alone = _tune(["dense_64x64x64", "--set", f"transfer_from={tmp_path}", "--preset", "metaschedule"])
    assert library_alone.returncode == 2 and "set first_round_transferred K" in library_alone.stderr
    exclude_alone = _tune(["dense_64x64x64", "--set", "transfer_exclude_networks=held-out", "--set",
                           "transfer_from=none"])
    assert exclude_alone.returncode == 2 and "set transfer_from" in exclude_alone.stderr


def test_a_corrupt_line_in_the_work_dirs_database_is_set_aside_and_counted(tmp_path, collected, host_platform,
                                                                           caplog):
    # One garbage line appended to database_tuning_record.json made MetaSchedule's reader fail ("parallel_for_dynamic
    # error with Cannot tokenize") and the work dir could no longer be resumed.
    from conftest import TINY_TRIALS

    dataset, _ = collected
    work = tmp_path / "w"
    dataset.store(host_platform.id).export_database(work)
    records = work / "database_tuning_record.json"
    good = records.read_text().splitlines()
    with open(records, "a", encoding="utf-8") as handle:
        handle.write("garbage {not json\n")
        handle.write('[0, [[["SampleCategorical"')  # a last line cut by a kill
    done = _tune(["dense_64x64x64", "--work-dir", str(work), "--trials", str(TINY_TRIALS), "--set", "compile=false",
                  "--json"])
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["trials"] == TINY_TRIALS  # every good record still counts
    assert report["database_lines_set_aside"]["lines"] == 2
    assert "moved 2 unreadable lines" in caplog.text and "Traceback" not in done.stderr  # a warning line
    assert records.read_text().splitlines() == good
    aside = Path(report["database_lines_set_aside"]["moved_to"])
    assert aside.read_text().splitlines() == ["garbage {not json", '[0, [[["SampleCategorical"']
    # A workload line cannot be skipped (records name workloads by line number): one line naming it
    workloads = work / "database_workload.json"
    lines = workloads.read_text().splitlines()
    workloads.write_text("\n".join(["{broken", *lines[1:]]) + "\n")
    broken = _tune(["dense_64x64x64", "--work-dir", str(work), "--trials", str(TINY_TRIALS), "--set", "compile=false"])
    assert broken.returncode == 2 and "database_workload.json:1: unreadable workload line" in broken.stderr
    assert len(broken.stderr.strip().splitlines()) == 1
