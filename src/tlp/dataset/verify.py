"""``tlp dataset verify``: check every segment and tail of a dataset for damage, without trusting any of it."""

from __future__ import annotations

from typing import Any

from tlp.dataset.best_programs import index_status
from tlp.dataset.store import Dataset, DatasetError


def verify_dataset(dataset: Dataset, record_missing: bool = False) -> dict[str, Any]:
    """Check the catalogue and every table of every platform; ``problems`` is empty when the dataset is clean.

    ``record_missing`` first records checksums of segments that have none and read cleanly (under the writer lock,
    like ``tlp dataset seal``); segment files themselves are never rewritten.
    """
    problems: list[dict[str, str]] = []
    checks: list[dict[str, Any]] = []
    recorded: list[str] = []
    indexes: dict[str, str] = {}  # the index of each workload's fastest programs: not data, only read time
    try:
        dataset.catalogue()
    except DatasetError as error:
        problems.append({"path": str(dataset.path / Dataset.CATALOGUE), "problem": str(error)})
    for platform_id in dataset.platform_ids():
        try:
            store = dataset.store(platform_id)
        except DatasetError as error:  # an unreadable platform.json: report it, check the other platforms
            problems.append({"path": str(dataset.path / platform_id), "problem": str(error)})
            continue
        if store.platform.record_format == "metaschedule":
            indexes[platform_id] = index_status(store)
        if record_missing:
            with store:  # raises when a collector is writing this platform: try again when it is done
                for table in store.tables():
                    recorded.extend(str(path) for path in table.record_missing())
        for table in store.tables():
            try:
                table_checks = table.check()
            except DatasetError as error:  # an unreadable checksum manifest
                problems.append({"path": str(table.manifest_path), "problem": str(error)})
                continue
            for check in table_checks:
                checks.append(check.to_json())
                problems.extend({"path": str(check.path), "problem": p} for p in check.problems)
    segments = [c for c in checks if c["path"].endswith(".xz")]
    return {
        "path": str(dataset.path),
        "clean": not problems,
        "platforms": len(dataset.platform_ids()),
        "segments": len(segments),
        "segments_unrecorded": sum(c["status"] == "unrecorded" for c in segments),
        "segments_damaged": sum(c["status"] == "damaged" for c in segments),
        "tails": len(checks) - len(segments),
        "recorded": recorded,
        "indexes": indexes,
        "problems": problems,
        "checks": checks,
    }


def format_verification(result: dict[str, Any]) -> str:
    """One line per problem, the unrecorded segments per table, then a summary."""
    lines = [f"recorded the checksum of {path}" for path in result["recorded"]]
    # Errors raised while reading already start with their file; the checks' problems do not.
    lines += [p["problem"] if p["problem"].startswith(p["path"]) else f"{p['path']}: {p['problem']}"
              for p in result["problems"]]
    unrecorded: dict[str, list[str]] = {}
    for check in result["checks"]:
        if check["status"] == "unrecorded":
            table, number = check["path"].rsplit(".", 2)[:2]
            unrecorded.setdefault(table, []).append(number)
    for table, numbers in unrecorded.items():
        lines.append(f"{table}: no checksum recorded for segment{'s' if len(numbers) > 1 else ''} "
                     f"{', '.join(numbers)} (they read cleanly; sealed before checksums were kept)")
    lines.append(
        f"{result['path']}: {result['platforms']} platforms, {result['segments']} segments "
        f"({result['segments_unrecorded']} without checksum, {result['segments_damaged']} damaged), "
        f"{result['tails']} tails: {len(result['problems'])} problems")
    if result["segments_unrecorded"]:
        lines.append(f"record the missing checksums with `tlp dataset verify {result['path']} --record-missing`")
    stale = sorted(platform for platform, status in result["indexes"].items() if status != "current")
    if stale:
        lines.append(f"{len(stale)} platform{'s' if len(stale) > 1 else ''} ({', '.join(stale)}) without an index of "
                     "each workload's fastest programs up to its segments (nothing is lost; every schedule library "
                     f"read parses what it misses): `tlp dataset seal {result['path']}` brings them up to date")
    return "\n".join(lines)
