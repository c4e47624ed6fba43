"""A synthetic dataset of N programs made from one platform's shipped records, for the growth benchmark.

    .venv/bin/python benchmarks/scale/synthesize.py --programs 100000 --out /tmp/scale/100k

Each program is a real trace of the source platform with its decisions varied: a tile's factors permuted (their
product, hence the loop extent, is kept, so the trace still replays on its workload), a categorical decision (the
unroll step, ...) drawn again among its candidates; its latency is the source's times a log-normal factor. Programs
are written through the store's own API (``PlatformStore.append``, sealed every ``--segment`` programs, as a
collection or an import would), with the source's workloads and catalogue entries. Never committed: it is made
in minutes from the shipped dataset.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True, help="a new dataset folder")
    parser.add_argument("--source", default=DEFAULT_DATASET)
    parser.add_argument("--platform", default="llvm-emeraldrapids-2c-ecb6fd07")
    parser.add_argument("--segment", type=int, default=20000, help="programs per sealed segment")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.out.exists():
        raise SystemExit(f"--out {args.out}: exists; give a new folder")
    summary = synthesize(Dataset(args.source), args.platform, args.out, args.programs, args.segment, args.seed)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
