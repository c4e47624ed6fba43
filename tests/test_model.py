"""The TLP network variants and the ranking loss, on small tensors."""

import pytest
import torch

from tlp.features.featurizer import FeatureConfig
from tlp.model.losses import (
    LISTWISE_TEMPERATURES,
    LOSSES,
    MEASURED_TERMS,
    expected_slowdown_loss,
    lambdarank_loss,
    soft_listwise_loss,
    soft_listwise_slowdown_loss,
)
from tlp.model.network import ARCHS, ModelConfig, TLPNet

FEATURES = FeatureConfig(seq_len=16)


def batch(n=6, length=10, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.zeros(n, FEATURES.seq_len, FEATURES.width)
    x[:, :length, 0] = torch.randint(2, 20, (n, length), generator=generator).float()
    x[:, :length, 1:3] = torch.randint(0, 30, (n, length, 2), generator=generator).float()
    x[:, :length, FEATURES.columns()["numbers"]] = torch.randn(n, length, FEATURES.num_numbers, generator=generator)
    return x


@pytest.mark.parametrize("arch", ARCHS)
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


def test_the_architectures_are_attention_and_lstm():
    assert ARCHS == ("attention", "lstm")
    with pytest.raises(ValueError, match="unknown architecture 'transformer'"):
        TLPNet(FEATURES, ModelConfig(arch="transformer", hidden=16, heads=2))


def test_ids_beyond_the_vocabulary_do_not_crash():
    net = TLPNet(FEATURES, ModelConfig(hidden=16, heads=2, kind_vocab=8, string_vocab=8)).eval()
    x = batch()
    x[:, 0, 0] = 1000
    x[:, 0, 1] = 1000
    assert torch.isfinite(net(x)).all()


RANKING_LOSSES = [lambdarank_loss, soft_listwise_loss, expected_slowdown_loss, soft_listwise_slowdown_loss]


def test_the_selectable_losses_are_lambdarank_and_soft_listwise_slowdown():
    assert LOSSES == {"lambdarank": lambdarank_loss, "soft-listwise+slowdown": soft_listwise_slowdown_loss}
    # distillation: the listwise part (temperature 0.3) on the targets, the slowdown term on the measured labels
    assert MEASURED_TERMS == {"soft-listwise+slowdown": (soft_listwise_loss, expected_slowdown_loss)}
    assert LISTWISE_TEMPERATURES == {"soft-listwise+slowdown": 0.3}


@pytest.mark.parametrize("loss_fn", RANKING_LOSSES)
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


def test_soft_listwise_loss_cares_most_about_the_first_places():
    # Swapping the two slowest programs of a task costs less than swapping the two fastest; a sharper temperature
    # (0.1, the removed plain listwise loss) hardly sees a swap of the runner-ups that 0.3 learns from.
    labels = torch.tensor([1.0, 0.5, 0.1, 0.05])
    one_task = torch.zeros(4, dtype=torch.long)
    ordered = torch.tensor([4.0, 3.0, 2.0, 1.0])
    base = soft_listwise_loss(ordered, labels, one_task)
    tail_swapped = soft_listwise_loss(torch.tensor([4.0, 3.0, 1.0, 2.0]), labels, one_task)
    head_swapped = soft_listwise_loss(torch.tensor([3.0, 4.0, 2.0, 1.0]), labels, one_task)
    assert tail_swapped - base < 0.5 * (head_swapped - base)
    middle = torch.tensor([4.0, 2.0, 3.0, 1.0])
    sharp = soft_listwise_loss(middle, labels, one_task, 0.1) - soft_listwise_loss(ordered, labels, one_task, 0.1)
    assert soft_listwise_loss(middle, labels, one_task) - base > 3 * sharp


def test_slowdown_loss_punishes_a_catastrophic_first_pick_more_than_listwise_does():
    # Two wrong first picks: one at 1.25x the best, one at 20x. Listwise hardly tells them apart (both put the
    # best second); the expected slowdown does.
    one_task = torch.zeros(3, dtype=torch.long)
    mild, catastrophic = torch.tensor([1.0, 0.8, 0.05]), torch.tensor([1.0, 0.05, 0.8])
    scores = torch.tensor([2.0, 3.0, 0.0])  # the second program comes first
    listwise_gap = soft_listwise_loss(scores, catastrophic, one_task) / soft_listwise_loss(scores, mild, one_task)
    slowdown_gap = expected_slowdown_loss(scores, catastrophic, one_task) / expected_slowdown_loss(scores, mild, one_task)
    assert listwise_gap < 2.0 and slowdown_gap > 3.0
    # Its value is log E[latency / best] under softmax(scores): 0 when all the mass is on the best program.
    assert expected_slowdown_loss(torch.tensor([50.0, 0.0, 0.0]), mild, one_task).item() == pytest.approx(0, abs=1e-6)


# The expected slowdown alone stops learning once no mass sits on a slow program: it trains only beside a listwise loss.
@pytest.mark.parametrize("loss_fn", [f for f in RANKING_LOSSES if f is not expected_slowdown_loss])
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
