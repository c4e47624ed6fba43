import pytest

from tlp.workloads import UnknownWorkloadError, expand_names, held_out_networks, list_workloads, load_tasks
from tlp.workloads.operators import OPERATORS, operator_families


def test_groups_expand_to_names():
    assert expand_names(["test"]) == ["resnet50", "resnext50", "mobilenet_v2", "bert_base", "bert_tiny"]
    assert set(held_out_networks()) == set(expand_names(["test"]))
    train = expand_names(["train"])
    assert len(train) >= 5 and not set(train) & set(held_out_networks())
    assert expand_names(["ops"]) == list(operator_families())


def test_held_out_architectures_train_at_another_input_size():
    # TenSet's protocol: only the 224x224 variants are held out; the same architectures at 240 are training data.
    from tlp.workloads.networks import NETWORKS, VARIANT_IMAGE_SIZES

    train = expand_names(["train"])
    size = VARIANT_IMAGE_SIZES[0]
    for name in ("resnet50", "resnext50", "mobilenet_v2"):
        variant = NETWORKS[f"{name}_{size}"]
        assert variant.name in train and not variant.held_out
        assert variant.example_inputs()[0].shape == (1, 3, size, size)
        assert variant.build is NETWORKS[name].build  # the same architecture and weights, another input
    assert NETWORKS["bert_tiny_s64"].example_inputs()[0].shape == (1, 64) and "bert_tiny_s64" in train


def test_unknown_workload_is_a_clear_error():
    with pytest.raises(UnknownWorkloadError, match="unknown workload 'resnet51'.*resnet50"):
        expand_names(["resnet51"])


def test_operator_zoo_covers_the_families():
    families = operator_families()
    for family in ["dense", "batch_matmul", "conv2d_nchw", "conv2d_nhwc", "depthwise_conv2d_nchw", "max_pool2d",
                   "softmax", "layer_norm", "gelu_chain"]:
        assert families[family], family
    dilated = [name for name in OPERATORS if name.startswith("conv2d") and not name.endswith("_d1")]
    strided = [name for name in OPERATORS if name.startswith("conv2d") and "_s2_" in name]
    assert dilated and strided


def test_operator_tasks_are_real_tir(host_platform):
    tasks = load_tasks(["softmax", "dense_64x64x64"], host_platform.target)
    assert len(tasks) == len(operator_families()["softmax"]) + 1
    assert len({t.key for t in tasks}) == len(tasks)
    assert all(t.mod["main"].params for t in tasks)
    dense = next(t for t in tasks if t.name.startswith("dense"))
    assert dense.io_bytes == 3 * 64 * 64 * 4  # data, weight and output, float32
    assert dense.flops == 2 * 64 ** 3


def test_network_tasks_come_from_torch_export(host_platform):
    """BERT-tiny through torch.export -> Relax -> legalize/fuse -> extract_tasks, weights kept."""
    tasks = load_tasks(["bert_tiny"], host_platform.target)
    assert len(tasks) >= 10
    assert all(t.network == "bert_tiny" and t.weight >= 1 for t in tasks)
    assert any(t.weight > 1 for t in tasks)  # repeated layers share a task and add to its weight
    assert any("matmul" in t.name for t in tasks)
    # the cache returns the same tasks
    again = load_tasks(["bert_tiny"], host_platform.target)
    assert [t.key for t in again] == [t.key for t in tasks]


def test_list_workloads_has_networks_and_operators():
    infos = {info.name: info for info in list_workloads()}
    assert len([i for i in infos.values() if i.kind == "network"]) >= 10
    assert infos["resnet50"].held_out and not infos["resnet18"].held_out
