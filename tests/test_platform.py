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
