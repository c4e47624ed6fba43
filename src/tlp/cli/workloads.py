"""`tlp workloads list`: the networks and operator families that can be tuned or measured."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tlp.cli.common import add_target_args, target_of


def cmd_workloads_list(args: argparse.Namespace) -> int:
    from tlp.workloads import list_workloads, load_tasks  # pylint: disable=import-outside-toplevel

    target = target_of(args)
    rows = []
    for info in list_workloads():
        count = "?"
        if info.kind == "operators" or not args.no_count:
            tasks = load_tasks([info.name], target)
            count = f"{len(tasks)}"
            if info.kind == "network":
                count += f" ({len({t.key for t in tasks})} unique)"
        rows.append((info.name, info.kind, "test" if info.held_out else "train", count, info.description))
    if args.json:
        print(json.dumps([dict(zip(("name", "kind", "split", "tasks", "description"), r)) for r in rows], indent=1))
        return 0
    widths = [max(len(str(r[i])) for r in rows + [("name", "kind", "split", "tasks", "")]) for i in range(4)]
    print("  ".join(h.ljust(w) for h, w in zip(("name", "kind", "split", "tasks"), widths)) + "  description")
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row[:4], widths)) + "  " + row[4])
    print("\ngroups: ops (all operators), train, test, all")
    return 0


def register(verbs: Any) -> None:
    workloads = verbs.add_parser("workloads", help="the workload zoo").add_subparsers(dest="action", required=True)
    listing = workloads.add_parser("list", help="list networks and operator families with task counts")
    listing.add_argument("--json", action="store_true")
    listing.add_argument("--no-count", action="store_true", help="skip extracting networks (fast)")
    add_target_args(listing)
    listing.set_defaults(func=cmd_workloads_list)
