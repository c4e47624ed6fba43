"""Tuning feeds the dataset: `tlp tune --dataset D` and `tlp.dataset.add_tuning_run`, on a real tiny search."""

import json
import shutil

import pytest

from conftest import tlp_cli
from tlp.dataset import Dataset, add_tuning_run
from tlp.dataset.importer import replayed_program_hash

TRIALS = 8


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A real `tlp tune` of a 64x64x64 dense (two search rounds of 4, XGBoost-guided) feeding a fresh dataset."""
    root = tmp_path_factory.mktemp("tune_dataset")
    work_dir, dataset = root / "run", root / "dataset"
    command = ["tune", "dense_64x64x64", "--trials", str(TRIALS), "--set", "trials_per_iter=4", "--set", "population=64",
               "--cost-model", "xgb", "--work-dir", str(work_dir), "--dataset", str(dataset), "--json"]
    first = tlp_cli(command, check=True)
    return command, work_dir, dataset, json.loads(first.stdout)


def _record_lines(dataset, platform_id):
    return sum(1 for _ in Dataset(dataset).store(platform_id).records.lines())


def test_every_measured_candidate_lands_with_its_origin(tuned, host_platform):
    _, _, dataset, report = tuned
    added = report["dataset"]
    assert added["platform"] == host_platform.id  # the platform tuned: this machine, the host target
    assert added["imported"] == TRIALS and added["already_present"] == 0
    store = Dataset(dataset).store(host_platform.id)
    programs = list(store.iter_programs())
    assert len(programs) == TRIALS and len({p.id for p in programs}) == TRIALS
    assert all(p.meta["source"] == "search" and p.meta["cost_model"] == "xgb" for p in programs)
    assert sorted(p.meta["round"] for p in programs) == [0] * 4 + [1] * 4  # the search's first and second round
    for program in programs:  # the logged hash of the candidate is the hash of the stored trace, replayed
        assert program.meta["program_hash"] == replayed_program_hash(store.workload_json(program.workload_key),
                                                                     program)
    assert sum(p.latency is not None for p in programs) >= TRIALS - 1
    catalogue = Dataset(dataset).catalogue()  # keyed and named as `tlp collect` keys the same operator
    (key, entry), = catalogue.items()
    assert key == programs[0].workload_key and entry["name"] == "dense_64x64x64"
    assert entry["networks"] == {"op:dense": 1}


def test_rerunning_or_reimporting_appends_nothing(tuned, host_platform):
    command, work_dir, dataset, _ = tuned
    again = json.loads(tlp_cli(command, check=True).stdout)
    assert again["dataset"]["imported"] == 0 and again["dataset"]["already_present"] == TRIALS
    imported = tlp_cli(["dataset", "import", str(work_dir), "--dataset", str(dataset),
                        "--measured-here"], check=True)
    assert json.loads(imported.stdout)["imported"] == 0
    assert json.loads(imported.stdout)["platform"] == host_platform.id  # the same platform as --measured-here
    assert _record_lines(dataset, host_platform.id) == TRIALS
    assert tlp_cli(["dataset", "verify", str(dataset)]).returncode == 0


def test_the_same_program_by_another_trace_is_not_stored_twice(tuned, host_platform, tmp_path):
    """Duplicates are found by program hash: a trace with an extra no-op instruction schedules the same IR."""
    _, work_dir, dataset, _ = tuned
    copy = tmp_path / "other_run"
    copy.mkdir()
    shutil.copy(work_dir / "database_workload.json", copy)
    lines = []
    for line in (work_dir / "database_tuning_record.json").read_text().splitlines():
        index, (trace, run_secs, target, args_info) = json.loads(line)
        insts = trace[0]
        at = next(i for i, inst in enumerate(insts) if inst[0] == "EnterPostproc")
        trace = [insts[: at + 1] + [insts[at]] + insts[at + 1:], trace[1]]  # EnterPostproc twice: same program
        lines.append(json.dumps([index, [trace, run_secs, target, args_info]]))
    (copy / "database_tuning_record.json").write_text("\n".join(lines) + "\n")
    summary = add_tuning_run(Dataset(dataset), copy)  # no origins.jsonl: the traces are replayed to hash them
    assert summary.platform == host_platform.id
    assert summary.imported == 0 and summary.already_present == TRIALS
    assert _record_lines(dataset, host_platform.id) == TRIALS


def test_cli_import_of_a_tuning_run_keeps_origins_and_the_workloads_names(tuned, host_platform, tmp_path):
    """`tlp dataset import` of a `tlp tune` work directory: each program keeps its search round and guiding model,
    `--workload` catalogues the tasks as the run named them, and `--platform` files them under a stored platform."""
    _, work_dir, dataset, _ = tuned
    fresh = tmp_path / "fresh"
    done = tlp_cli(["dataset", "import", str(work_dir), "--dataset", str(fresh), "--measured-here",
                    "--workload", "dense_64x64x64"], check=True)
    assert json.loads(done.stdout)["imported"] == TRIALS
    programs = list(Dataset(fresh).store(host_platform.id).iter_programs())
    assert all(p.meta["source"] == "search" and p.meta["cost_model"] == "xgb" for p in programs)
    assert sorted(p.meta["round"] for p in programs) == [0] * 4 + [1] * 4
    (entry,) = Dataset(fresh).catalogue().values()
    assert entry["name"] == "dense_64x64x64" and entry["networks"] == {"op:dense": 1}
    # Logs of a platform the dataset already holds: filed under it (here: nothing new), an unknown one refused.
    again = tlp_cli(["dataset", "import", str(work_dir), "--dataset", str(fresh), "--platform",
                     host_platform.id], check=True)
    assert json.loads(again.stdout)["already_present"] == TRIALS
    unknown = tlp_cli(["dataset", "import", str(work_dir), "--dataset", str(dataset), "--platform",
                       "llvm-nowhere-1c-00000000"])
    assert unknown.returncode != 0 and "no platform 'llvm-nowhere-1c-00000000'" in unknown.stderr


LINEAR_GELU = '''
import torch

class LinearGelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(64, 64)

    def forward(self, x):
        return torch.nn.functional.gelu(self.linear(x)).transpose(0, 1)

torch.manual_seed(0)
model = LinearGelu().eval()
example_inputs = (torch.randn(16, 64),)
'''


@pytest.mark.slow
def test_info_counts_network_tasks_with_a_one_program_design_space_apart(tmp_path, host_platform):
    """`tlp dataset info` gives the programs per network task also over the tasks a search can add programs to:
    an elementwise task's design space holds one program, however long anyone searches."""
    source, dataset = tmp_path / "linear_gelu.py", tmp_path / "dataset"
    source.write_text(LINEAR_GELU)
    tlp_cli(["tune", str(source), "--cost-model", "random", "--trials", "8", "--set", "trials_per_iter=4",
             "--set", "population=64", "--work-dir", str(tmp_path / "run"), "--dataset", str(dataset),
             "--set", "predicted_schedules=false", "--json"], check=True)
    info = json.loads(tlp_cli(["dataset", "info", str(dataset), "--json"], check=True).stdout)
    info = info["per_platform"][host_platform.id]
    tunable = info["network_tasks"] - info["one_program_network_tasks"]
    assert info["one_program_network_tasks"] >= 1 and tunable >= 1, info
    assert info["valid_per_tunable_network_task_median"] > 1  # the matmul: several programs; the others: one each
    assert info["tunable_network_tasks_with_at_least"] == {"32": 0, "64": 0, "96": 0}
    assert sum(info["tunable_tasks_below_96_per_network"].values()) == tunable  # one network, all short of 96
    text = tlp_cli(["dataset", "info", str(dataset)], check=True).stdout
    assert f"the {tunable} with a design space to search" in text and "tunable tasks with < 96 programs" in text
