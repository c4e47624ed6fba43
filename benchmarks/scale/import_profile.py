"""Where an import's time goes: a trace replay's instructions, and sealing at each xz preset.

    .venv/bin/python benchmarks/scale/import_profile.py /tmp/scale/n100000.scratch/work_dir

Replays ``--traces`` records of a MetaSchedule work directory (every 50th) one at a time, as the importer does
(``tlp.dataset.importer``), timing making the schedule and each instruction (between the calls of a decision
provider, which TVM makes before each instruction); then compresses the first 64 MB of the record file at xz
presets 3, 6, 9 and 9e. One process; writes ``results/import_profile.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import lzma
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import results_dir, stamp, write_json  # pylint: disable=wrong-import-position

from tlp._tvm import tvm  # pylint: disable=wrong-import-position
from tlp._tvm import ms, structural_hash  # pylint: disable=wrong-import-position
from tlp.dataset import replay  # pylint: disable=wrong-import-position
from tlp.dataset.sampler import program_hash_of  # pylint: disable=wrong-import-position


def replay_profile(work_dir: Path, traces: int) -> dict:
    workloads = [json.dumps(json.loads(line)) for line in open(work_dir / "database_workload.json")]
    lines = itertools.islice(open(work_dir / "database_tuning_record.json"), 0, None, 50)
    records = [(record[0], replay.with_bool_annotations(record[1][0]))
               for record in (json.loads(line) for line in itertools.islice(lines, traces))]
    seconds: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    making = whole = 0.0
    for index, trace_json in records:
        mod = ms.database.Workload.from_json(json.loads(workloads[index])).mod
        started = time.perf_counter()
        schedule = tvm.s_tir.Schedule(mod)
        made = time.perf_counter()
        tvm.s_tir.Trace.apply_json_to_schedule(trace_json, schedule)
        whole += time.perf_counter() - made
        making += made - started
        last: list = [None, 0.0]

        def provider(inst, inputs, attrs, decision, last=last):  # called before each instruction is applied
            now = time.perf_counter()
            if last[0] is not None:
                seconds[last[0]] += now - last[1]
                calls[last[0]] += 1
            last[0], last[1] = inst.kind.name, time.perf_counter()
            return decision

        schedule.trace.apply_to_schedule(tvm.s_tir.Schedule(mod), remove_postproc=False, decision_provider=provider)
        seconds[last[0]] += time.perf_counter() - last[1]
        calls[last[0]] += 1
    per_trace = {kind: round(total / len(records) * 1e3, 3) for kind, total in
                 sorted(seconds.items(), key=lambda item: -item[1])}
    return {"traces": len(records), "make_schedule_ms": round(making / len(records) * 1e3, 3),
            "apply_json_ms": round(whole / len(records) * 1e3, 3), "per_instruction_kind_ms_per_trace": per_trace,
            "calls_per_trace": {kind: round(calls[kind] / len(records), 2) for kind in per_trace}}


def import_replay_profile(work_dir: Path, traces: int) -> dict:
    """The importer's replay (``tlp.dataset.replay.replayed_hash``) against TVM's literal one, on the same traces:
    time per trace (the first pass learns each trace shape's counts, the second uses them) and whether every
    program hash agrees."""
    workloads = [json.dumps([str(structural_hash(ms.database.Workload.from_json(json.loads(line)).mod)),
                             *json.loads(line)[1:]]) for line in open(work_dir / "database_workload.json")]
    lines = itertools.islice(open(work_dir / "database_tuning_record.json"), 0, None, 50)
    records = [(record[0], record[1][0]) for record in (json.loads(line) for line in itertools.islice(lines, traces))]
    literal_s, passes, agree = 0.0, [0.0, 0.0], 0
    for index, trace_json in records:
        started = time.perf_counter()
        schedule = tvm.s_tir.Schedule(ms.database.Workload.from_json(json.loads(workloads[index])).mod)
        tvm.s_tir.Trace.apply_json_to_schedule(replay.with_bool_annotations(trace_json), schedule)
        literal = program_hash_of(schedule.mod)
        literal_s += time.perf_counter() - started
        for number in (0, 1):
            started = time.perf_counter()
            phash = replay.replayed_hash(json.loads(workloads[index])[0], workloads[index], trace_json)
            passes[number] += time.perf_counter() - started
        agree += phash == literal
    return {"traces": len(records), "literal_replay_ms": round(literal_s / len(records) * 1e3, 3),
            "import_replay_first_pass_ms": round(passes[0] / len(records) * 1e3, 3),
            "import_replay_ms": round(passes[1] / len(records) * 1e3, 3), "same_program_hash": agree}


def xz_profile(record_file: Path) -> dict:
    data = open(record_file, "rb").read(64 << 20)
    data = data[: data.rfind(b"\n") + 1]
    rows = {}
    for name, preset in (("3", 3), ("6", 6), ("9", 9), ("9e", 9 | lzma.PRESET_EXTREME)):
        started = time.perf_counter()
        compressed = lzma.compress(data, preset=preset)
        rows[name] = {"mb_per_s": round(len(data) / (time.perf_counter() - started) / 1e6, 1),
                      "ratio": round(len(data) / len(compressed), 1)}
    return {"bytes": len(data), "presets": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work_dir", type=Path, help="a MetaSchedule work directory (growth.py's import exports one)")
    parser.add_argument("--traces", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=results_dir(__file__) / "import_profile.json")
    args = parser.parse_args()
    result = {"replay": replay_profile(args.work_dir, args.traces),
              "import_replay": import_replay_profile(args.work_dir, args.traces),
              "seal": xz_profile(args.work_dir / "database_tuning_record.json"), **stamp()}
    write_json(args.out, result)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
