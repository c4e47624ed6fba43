import pytest

from tlp.platform import Platform, TargetError, host_target, parse_target


def test_host_target_names_the_cpu():
    target = host_target()
    assert target["kind"] == "llvm"
    assert target["mcpu"] and target["mcpu"] != "generic"
    assert target["num-cores"] >= 1


def test_platform_id_depends_on_target_and_hardware(host_platform):
    other_cores = Platform(dict(host_platform.target, **{"num-cores": 1}), host_platform.hardware)
    other_machine = Platform(host_platform.target, dict(host_platform.hardware, cpu_model="Other CPU"))
    assert len({host_platform.id, other_cores.id, other_machine.id}) == 3
    assert Platform.from_json(host_platform.to_json()).id == host_platform.id


@pytest.mark.parametrize(
    "spec, message",
    [
        ("llvm -mcpu=znver3", "not a JSON object"),
        ('{"kind": "llvm", ', "not valid JSON"),
        ('{"mcpu": "znver3"}', "'kind'"),
        ('{"kind": "no-such-kind"}', "TVM rejects target"),
    ],
)
def test_bad_targets_get_clear_errors(spec, message):
    with pytest.raises(TargetError, match=message):
        parse_target(spec)


def test_rpc_platform_requires_mcpu():
    with pytest.raises(TargetError, match="mcpu"):
        Platform.remote({"kind": "llvm"}, "board")


def test_an_unknown_mcpu_or_a_missing_num_cores_is_one_line_before_anything_runs(tmp_path):
    # `--target '{"kind":"llvm","mcpu":"nosuchcpu"}'` reached MetaSchedule, which stopped with an InternalError about
    # num-cores (and LLVM had quietly compiled for a generic CPU).
    import argparse

    from conftest import tlp_cli
    from tlp.cli.common import target_of
    from tlp.platform import check_llvm_target, check_runs_here

    for verb in (["collect", "--workloads", "dense_64x64x64", "--dataset", str(tmp_path / "d")],
                 ["tune", "dense_64x64x64", "--work-dir", str(tmp_path / "w")]):
        result = tlp_cli(verb + ["--target", '{"kind": "llvm", "mcpu": "znver"}'])
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert result.stderr.count("\n") == 1 and "unknown CPU" in result.stderr and "znver4" in result.stderr
    assert not (tmp_path / "d").exists() and not (tmp_path / "w").exists()
    with pytest.raises(TargetError, match='no "num-cores".*add "num-cores": N'):
        check_runs_here(parse_target({"kind": "llvm", "mcpu": "x86-64-v2"}))  # tune() from Python
    # the command line measures here, so it takes this machine's cores, as the default target does
    filled = target_of(argparse.Namespace(target='{"kind": "llvm", "mcpu": "x86-64-v2"}'))
    assert filled["num-cores"] >= 1
    check_llvm_target(filled)
    with pytest.raises(TargetError, match="num-cores"):
        Platform.remote({"kind": "llvm", "mcpu": "znver3"}, "board")  # the remote core count is unknown here


def _filed_under_an_older_name(collected, host_platform, tmp_path):
    """A copy of the collection whose platform.json says it was measured on another host CPU than the target's: today's
    rule names it ...-on-<host>-..., but its folder has the name an older rule gave it (no -on- part)."""
    import json
    import shutil

    folder = tmp_path / "old" / host_platform.id
    shutil.copytree(collected[0].path / host_platform.id, folder)
    shutil.copy(collected[0].path / "tasks.json", tmp_path / "old" / "tasks.json")
    meta = json.loads((folder / "platform.json").read_text())
    other_host = "icelake-server" if host_platform.target.get("mcpu") == "znver4" else "znver4"  # any host but this
    meta["hardware"]["llvm_cpu"] = other_host
    (folder / "platform.json").write_text(json.dumps(meta))
    assert f"-on-{other_host}-" in Platform.from_json(meta).id and Platform.from_json(meta).id != folder.name
    return tmp_path / "old", folder.name


def test_a_platform_filed_under_an_older_name_keeps_its_folders_id(collected, host_platform, tmp_path,
                                                                    tiny_checkpoint):
    # `tlp adapt --platform llvm-sandybridge-2c-2f9238bb` failed with "no platform 'llvm-sandybridge-2c-on-znver4-...'"
    # though `tlp dataset info` listed the folder: the store's id was recomputed from platform.json.
    import json

    from conftest import tlp_cli
    from tlp.dataset import Dataset

    path, name = _filed_under_an_older_name(collected, host_platform, tmp_path)
    dataset = Dataset(path)
    store = dataset.store(name)
    assert store.platform.id == name and len(list(store.iter_programs())) > 0
    # a writer with the same target and hardware continues that folder, never starts a second one
    assert dataset.store_for(Platform(store.platform.target, store.platform.hardware)).path == store.path
    assert dataset.platform_ids() == [name]
    info = tlp_cli(["dataset", "info", str(path), "--json"])
    assert name in json.loads(info.stdout)["platforms"]
    adapted = tlp_cli(["adapt", "--platform", name, "--dataset", str(path), "--model", str(tiny_checkpoint),
                       "--out", str(tmp_path / "adapted.pt"), "--held-out", "none", "--force", "-q", "--json"])
    # found under its folder's name: what stops it now is only that the tiny collection is too small for a head
    assert "no platform" not in adapted.stderr and f"{path / name}: 16 valid training programs" in adapted.stderr
