"""The import's replay (tlp.dataset.replay) gives the program TVM's literal replay gives, on real sampled traces."""

from __future__ import annotations

import json

import pytest

from tlp._tvm import tvm
from tlp.dataset import replay
from tlp.dataset.sampler import CandidateSampler, program_hash_of, trace_json
from tlp.workloads import load_tasks

# A padded convolution: its padding block's compute location is sampled (root, inline or a loop of the conv).
CONV2D = "conv2d_bias_relu_1x3x32x32_o16_k3_s1"


@pytest.fixture(scope="module")
def sampled(host_platform):
    """(workload key, workload JSON text, trace JSON) of random programs of the padded convolution."""
    task = load_tasks([CONV2D], host_platform.target)[0]
    sampler = CandidateSampler(task, host_platform.target)
    workload = json.dumps(task.workload_json)
    return [(task.key, workload, trace_json(candidate)) for seed in range(6) for candidate in sampler.random(8, seed)]


def literal_hash(workload_text: str, trace: list) -> str:
    from tlp._tvm import ms

    schedule = tvm.s_tir.Schedule(ms.database.Workload.from_json(json.loads(workload_text)).mod)
    tvm.s_tir.Trace.apply_json_to_schedule(trace, schedule)
    return program_hash_of(schedule.mod)


def location_decisions(trace: list) -> list[int]:
    insts, decisions = trace
    return [value for index, value in decisions if insts[index][0] == replay.SAMPLE_LOCATION]


def test_every_compute_location_replays_to_the_literal_program(sampled):
    replay._shapes.clear()
    seen = {decision for _, _, trace in sampled for decision in location_decisions(trace)}
    assert replay.ROOT in seen and any(decision >= 0 for decision in seen)  # both rewrites are exercised
    for key, workload, trace in sampled:
        expected = literal_hash(workload, trace)
        assert replay.replayed_hash(key, workload, trace) == expected  # learns the trace shape's counts
        assert replay.replayed_hash(key, workload, trace) == expected
        samples = [i for i, inst in enumerate(trace[0]) if inst[0] == replay.SAMPLE_LOCATION]
        if samples:  # the second replay named the locations outright
            direct = replay._locations_named(trace, samples, replay._shapes[(key, hash(json.dumps(trace[0])))])
            assert direct is not None and not any(inst[0] == replay.SAMPLE_LOCATION for inst in direct[0])
            assert literal_hash(workload, direct) == expected


def test_wrong_learnt_counts_fall_back_to_the_literal_replay(sampled):
    key, workload, trace = next(item for item in sampled if any(d >= 0 for d in location_decisions(item[2])))
    expected = literal_hash(workload, trace)
    replay.replayed_hash(key, workload, trace)
    shape_key = (key, hash(json.dumps(trace[0])))
    replay._shapes[shape_key] = [(consumers, loops + 3) for consumers, loops in replay._shapes[shape_key]]
    assert replay.replayed_hash(key, workload, trace) == expected
    assert replay.replayed_hash(key, workload, trace) == expected  # relearnt


def test_a_trace_that_does_not_replay_raises(sampled):
    key, workload, trace = sampled[0]
    broken = [[["GetSBlock", [], ["no_such_block", "main"], ["b0"]]], []]
    with pytest.raises(Exception):
        replay.replayed_hash(key, workload, broken)
    assert replay.replayed_hash(key, workload, trace) == literal_hash(workload, trace)
