"""A synthetic dataset of N programs made from one platform's shipped records, for the growth benchmark.

    .venv/bin/python benchmarks/scale/synthesize.py --programs 100000 --out /tmp/scale/100k
    .venv/bin/python benchmarks/scale/synthesize.py --programs 100000 --format ansor --out /tmp/scale/ansor-100k

Each program is a real trace of the source platform with its decisions varied: a tile's factors permuted (their
product, hence the loop extent, is kept, so the trace still replays on its workload), a categorical decision (the
unroll step, ...) drawn again among its candidates; its latency is the source's times a log-normal factor. Programs
are written through the store's own API (``PlatformStore.append``, sealed every ``--segment`` programs, as a
collection or an import would), with the source's workloads and catalogue entries. Never committed: it is made
in minutes from the shipped dataset.

``--format ansor`` writes Ansor/TenSet record files instead (one file per task, as TenSet's ``measure_records``),
for ``tlp dataset import --format ansor``: the real records of ResNet-50's tiled tasks (``tests/fixtures/ansor``)
made into tasks of 1,000 programs each (a TenSet task holds ~4,000), each a copy of a source task under a new
workload key, with its split lengths and unroll pragmas drawn again and a log-normal latency.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from tlp.dataset.store import DEFAULT_DATASET, Dataset, MeasuredProgram


def varied_decisions(trace_json: Any, rng: random.Random) -> Any:
    """``trace_json`` with each tile decision permuted and each categorical decision drawn again."""
    insts, decisions = trace_json
    varied = []
    for index, decision in decisions:
        kind, _, attrs, _ = insts[index]
        if kind == "SamplePerfectTile" and isinstance(decision, list):
            # Factors of 1 stay where they are: a unit loop moved elsewhere changes the loops later steps see.
            places = [i for i, factor in enumerate(decision) if factor != 1]
            decision = list(decision)
            for place, factor in zip(places, rng.sample([decision[i] for i in places], len(places))):
                decision[place] = factor
        elif kind == "SampleCategorical" and isinstance(decision, int) and attrs and isinstance(attrs[0], list):
            decision = rng.randrange(len(attrs[0]))
        varied.append([index, decision])
    return [insts, varied]


def synthesize(source: Dataset, platform_id: str, out: Path, programs: int, segment: int, seed: int) -> dict:
    """Write ``programs`` distinct synthetic programs of ``platform_id`` into a new dataset at ``out``."""
    rng = random.Random(seed)
    store = source.store(platform_id)
    seeds = [p for p in store.latest_programs().values() if p.latency is not None and p.trace_json[1]]
    catalogue = source.catalogue()
    target = Dataset(out)
    keys = sorted({p.workload_key for p in seeds})
    target.register_tasks([(key, catalogue[key]["name"], network, weight, catalogue[key].get("flops") or 0.0)
                           for key in keys for network, weight in catalogue[key]["networks"].items()])
    destination = target.store_for(store.platform)
    seen: set[str] = set()
    written, attempts, started = 0, 0, time.monotonic()
    with destination:
        for key in keys:
            destination.add_workload(store.workload_json(key))
        batch: list[MeasuredProgram] = []
        while written + len(batch) < programs:
            attempts += 1
            if attempts > 20 * programs:
                raise SystemExit(f"{platform_id}: only {written + len(batch)} distinct programs after {attempts} draws")
            source_program = rng.choice(seeds)
            trace = varied_decisions(source_program.trace_json, rng)
            latency = source_program.latency * rng.lognormvariate(0.0, 0.4)  # type: ignore[operator]
            program = MeasuredProgram(source_program.workload_key, trace, source_program.args_info,
                                      [latency * rng.uniform(0.98, 1.02) for _ in range(3)],
                                      meta={"source": f"synthetic:{source_program.id}"})
            if program.id in seen:
                continue
            seen.add(program.id)
            batch.append(program)
            if len(batch) == 2000 or written + len(batch) == programs:
                destination.append(batch)
                written += len(batch)
                batch = []
                if written % segment == 0 or written == programs:
                    destination.seal()
                    print(f"{written} programs, {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return {"programs": written, "source_programs": len(seeds), "tasks": len(keys), "draws": attempts,
            "seconds": round(time.monotonic() - started, 1), "platform": destination.platform.id}


ANSOR_SOURCE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "ansor" / "resnet-50-NHWC-B1-llvm.json"
UNROLL_STEPS = (0, 16, 64, 512)
PROGRAMS_PER_TASK = 1000


@lru_cache(maxsize=None)
def divisors(n: int) -> tuple[int, ...]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))


def varied_steps(steps: list[Any], rng: random.Random) -> list[Any]:
    """Ansor ``steps`` with each split's lengths drawn again (divisors whose product divides the extent, as the
    auto-scheduler's tiles) and each unroll pragma drawn again."""
    varied = []
    for step in steps:
        if step[0] == "SP" and isinstance(step[3], int) and step[3] > 0 and isinstance(step[4], list):
            left, lengths = step[3], []
            for _ in step[4]:
                lengths.append(rng.choice(divisors(left)))
                left //= lengths[-1]
            step = [*step[:4], lengths, *step[5:]]
        elif step[0] == "PR" and isinstance(step[3], str) and step[3].startswith("auto_unroll_max_step$"):
            step = [*step[:3], f"auto_unroll_max_step${rng.choice(UNROLL_STEPS)}"]
        varied.append(step)
    return varied


def synthesize_ansor(out: Path, programs: int, seed: int) -> dict:
    """Write ``programs`` distinct Ansor records into task files under ``out`` (a new folder)."""
    rng = random.Random(seed)
    sources = [record for record in (json.loads(line) for line in ANSOR_SOURCE.read_text().splitlines()
                                     if line.startswith("{"))
               if any(step[0] == "SP" for step in record["i"][1][1])]  # tiled tasks: thousands of variants each
    out.mkdir(parents=True)
    written, task, started = 0, 0, time.monotonic()
    while written < programs:
        source = sources[task % len(sources)]
        (key, *rest), (_, steps) = source["i"]
        # A new task: the source's workload key with another hash (the shapes, hence the steps, stay valid).
        new_hash = hashlib.md5(f"{key}:{task}".encode()).hexdigest()
        task_key = re.sub(r'^\["[0-9a-f]{32}"', f'["{new_hash}"', key)
        best = min(source["r"][0])
        seen: set[str] = set()
        count = min(PROGRAMS_PER_TASK, programs - written)
        with open(out / f"task{task:05d}.json", "w", encoding="utf-8") as handle:
            for _ in range(20 * count):  # a task with fewer variants than that ends with fewer programs
                varied = varied_steps(steps, rng)
                text = json.dumps(varied)
                if text in seen:
                    continue
                seen.add(text)
                latency = best * rng.lognormvariate(0.3, 0.4)
                record = {"i": [[task_key, *rest], [[], varied]],
                          "r": [[latency * rng.uniform(0.98, 1.02) for _ in range(3)], 0, 0.2,
                                source["r"][3] + written],
                          "v": source["v"]}
                handle.write(json.dumps(record) + "\n")
                written += 1
                if len(seen) == count:
                    break
        task += 1
    return {"programs": written, "tasks": task, "source_tasks": len(sources),
            "seconds": round(time.monotonic() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True, help="a new dataset folder")
    parser.add_argument("--source", default=DEFAULT_DATASET)
    parser.add_argument("--platform", default="llvm-emeraldrapids-2c-ecb6fd07")
    parser.add_argument("--segment", type=int, default=20000, help="programs per sealed segment")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--format", choices=["metaschedule", "ansor"], default="metaschedule",
                        help="ansor: Ansor record files (one per task) instead of a dataset")
    args = parser.parse_args()
    if args.out.exists():
        raise SystemExit(f"--out {args.out}: exists; give a new folder")
    if args.format == "ansor":
        print(json.dumps(synthesize_ansor(args.out, args.programs, args.seed)))
        return
    summary = synthesize(Dataset(args.source), args.platform, args.out, args.programs, args.segment, args.seed)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
