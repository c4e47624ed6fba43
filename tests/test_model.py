"""The TLP network variants and the ranking loss, on small tensors."""

import pytest
import torch

from tlp.features.featurizer import FeatureConfig
from tlp.model.losses import lambdarank_loss, listwise_loss, listwise_pairwise_loss, mse_loss, soft_listwise_loss
from tlp.model.network import ModelConfig, TLPNet

FEATURES = FeatureConfig(seq_len=16)


def batch(n=6, length=10, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.zeros(n, FEATURES.seq_len, FEATURES.width)
    x[:, :length, 0] = torch.randint(2, 20, (n, length), generator=generator).float()
    x[:, :length, 1:3] = torch.randint(0, 30, (n, length, 2), generator=generator).float()
    x[:, :length, FEATURES.columns()["numbers"]] = torch.randn(n, length, FEATURES.num_numbers, generator=generator)
    return x


@pytest.mark.parametrize("arch", ["attention", "lstm", "transformer"])
def test_variants_score_each_program_and_ignore_padding(arch):
    torch.manual_seed(0)
    net = TLPNet(FEATURES, ModelConfig(arch=arch, hidden=32, heads=4, kind_vocab=32, string_vocab=64)).eval()
    x = batch()
    scores = net(x)
    assert scores.shape == (6,) and torch.isfinite(scores).all()
    noisy = x.clone()
    noisy[:, 10:, 1:] = 5.0  # garbage in padding rows (kind 0) must not matter
    assert torch.allclose(net(noisy), scores, atol=1e-5)
    empty = torch.zeros(1, FEATURES.seq_len, FEATURES.width)
    assert torch.isfinite(net(empty)).all()


def test_ids_beyond_the_vocabulary_do_not_crash():
    net = TLPNet(FEATURES, ModelConfig(hidden=16, heads=2, kind_vocab=8, string_vocab=8)).eval()
    x = batch()
    x[:, 0, 0] = 1000
    x[:, 0, 1] = 1000
    assert torch.isfinite(net(x)).all()


@pytest.mark.parametrize("loss_fn", [lambdarank_loss, listwise_loss, soft_listwise_loss, listwise_pairwise_loss])
def test_ranking_losses_prefer_the_right_order_and_ignore_cross_task_pairs(loss_fn):
    labels = torch.tensor([1.0, 0.5, 0.2, 1.0, 0.1])
    groups = torch.tensor([0, 0, 0, 1, 1])
    right = torch.tensor([3.0, 2.0, 1.0, -5.0, -6.0])
    wrong = torch.tensor([1.0, 2.0, 3.0, -6.0, -5.0])
    assert loss_fn(right, labels, groups) < loss_fn(wrong, labels, groups)
    # shifting one task's scores relative to the other's changes nothing
    shifted = right + torch.tensor([0.0, 0.0, 0.0, 100.0, 100.0])
    assert torch.isclose(loss_fn(shifted, labels, groups), loss_fn(right, labels, groups))
    single = loss_fn(torch.tensor([1.0]), torch.tensor([1.0]), torch.tensor([0]))
    assert single.item() == 0.0
    assert mse_loss(right, labels, groups) > 0


def test_listwise_loss_hardly_cares_about_the_slow_tail():
    # Swapping the two slowest programs of a task costs far less than swapping the two fastest.
    labels = torch.tensor([1.0, 0.5, 0.1, 0.05])
    one_task = torch.zeros(4, dtype=torch.long)
    base = listwise_loss(torch.tensor([4.0, 3.0, 2.0, 1.0]), labels, one_task)
    tail_swapped = listwise_loss(torch.tensor([4.0, 3.0, 1.0, 2.0]), labels, one_task)
    head_swapped = listwise_loss(torch.tensor([3.0, 4.0, 2.0, 1.0]), labels, one_task)
    assert tail_swapped - base < 0.1 * (head_swapped - base)
    # The variants made to learn the order below the first place weigh a swap of the runner-ups far more.
    middle = torch.tensor([4.0, 2.0, 3.0, 1.0])
    for variant in (soft_listwise_loss, listwise_pairwise_loss):
        assert (variant(middle, labels, one_task) - variant(torch.tensor([4.0, 3.0, 2.0, 1.0]), labels, one_task)
                > 3 * (listwise_loss(middle, labels, one_task) - base))


@pytest.mark.parametrize("loss_fn", [lambdarank_loss, listwise_loss, soft_listwise_loss, listwise_pairwise_loss])
def test_training_steps_learn_a_ranking(loss_fn):
    torch.manual_seed(0)
    x = batch(n=32, seed=1)
    target = torch.sigmoid(x[:, :, FEATURES.columns()["numbers"].start].sum(1))  # a learnable signal
    groups = torch.arange(32) // 8
    net = TLPNet(FEATURES, ModelConfig(hidden=32, heads=4, kind_vocab=32, string_vocab=64))
    optimizer = torch.optim.Adam(net.parameters(), lr=3e-3)
    first = loss_fn(net(x), target, groups).item()
    for _ in range(60):
        optimizer.zero_grad()
        loss = loss_fn(net(x), target, groups)
        loss.backward()
        optimizer.step()
    assert loss.item() < first
    # What a search uses: in every task the top-scored program is (nearly) the fastest.
    with torch.no_grad():
        scores = net(x)
    for task in range(4):
        rows = groups == task
        assert target[rows][scores[rows].argmax()] >= 0.95 * target[rows].max()
