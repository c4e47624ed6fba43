"""`tlp dataset info|compare|import|seal|export|verify`: inspect and manage datasets."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tlp.cli.common import DEFAULT_DATASET, train_platforms


def cmd_dataset_info(args: argparse.Namespace) -> int:
    from tlp.dataset.info import dataset_info, format_info  # pylint: disable=import-outside-toplevel
    from tlp.dataset.store import Dataset, DatasetError  # pylint: disable=import-outside-toplevel

    if not Path(args.path).is_dir():
        raise DatasetError(f"{args.path}: no such dataset folder")
    if not 0 <= args.load_threshold <= 1:
        raise DatasetError(f"--load-threshold {args.load_threshold}: a share of the machine, between 0 and 1")
    info = dataset_info(Dataset(args.path, skip_damaged=args.skip_damaged), args.load_threshold)
    print(json.dumps(info, indent=1) if args.json else format_info(info))
    return 0


def _existing(path: str) -> Any:
    """The dataset at ``path``, which must be a folder already (reading and sealing make none)."""
    from tlp.dataset.store import Dataset, DatasetError  # pylint: disable=import-outside-toplevel

    if not Path(path).is_dir():
        raise DatasetError(f"{path}: no such dataset folder")
    return Dataset(path)


def cmd_dataset_compare(args: argparse.Namespace) -> int:
    from tlp.dataset.compare import compare_platforms, format_comparison  # pylint: disable=import-outside-toplevel
    from tlp.dataset.store import DatasetError  # pylint: disable=import-outside-toplevel

    if args.min_programs < 2:
        raise DatasetError(f"--min-programs {args.min_programs}: a ranking needs at least 2 shared programs per task")
    dataset = _existing(args.path)
    if not dataset.platform_ids():
        raise DatasetError(f"{args.path}: no platform stored here yet; comparing needs two that measured the same "
                           "programs (tlp collect --remeasure-from)")
    result = compare_platforms(dataset, train_platforms(dataset, args) if args.platforms else None, args.min_programs)
    print(json.dumps(result, indent=1) if args.json else format_comparison(result))
    return 0


def cmd_dataset_import(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from tlp.dataset.importer import import_work_dir
    from tlp.dataset.store import Dataset, DatasetError
    from tlp.dataset.tuning import ORIGINS, add_tuning_run
    from tlp.platform import machine_fingerprint
    from tlp.tune.sources import tuned_tasks

    if args.format == "ansor":
        return _import_ansor(args)
    if len(args.work_dir) != 1 or args.task_weights:
        raise DatasetError("tlp dataset import: one MetaSchedule work directory at a time (several files or folders "
                           "and --task-weights are for --format ansor)")
    dataset, work_dir = Dataset(args.dataset), Path(args.work_dir[0])
    # measured here: this machine's CPU, or its GPU for CUDA records (known once the records' target is read)
    hardware = machine_fingerprint if args.measured_here else {"description": args.hardware or "unknown"}
    # A platform the dataset already has: logs measured there (another session's machine) join its programs.
    platform = dataset.store(args.platform).platform if args.platform else None
    # the tuned workload's task names, networks and weights instead of names guessed from the functions
    tasks = tuned_tasks(args.workload, work_dir, args.top_tasks) if args.workload else None
    if (work_dir / ORIGINS).exists():  # a `tlp tune` run: keep each program's search round and guiding model
        summary = add_tuning_run(dataset, work_dir, platform, tasks, args.network, hardware)
    else:
        summary = import_work_dir(dataset, work_dir, args.network, hardware, platform=platform, tasks=tasks)
    print(json.dumps(summary.__dict__, indent=1))
    if not summary.imported and not summary.already_present:
        reasons = ", ".join(f"{reason} ({count})" for reason, count in summary.skipped.items())
        first = f"; first: {summary.examples[0]}" if summary.examples else ""
        raise DatasetError(f"nothing imported from {work_dir}: no usable tuning record ({reasons}){first}")
    return 0


def _import_ansor(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from tlp.dataset.ansor import import_ansor, load_task_weights
    from tlp.dataset.store import Dataset, DatasetError

    if args.measured_here:
        raise DatasetError("--measured-here: Ansor records come from another TVM; describe their machine with "
                           "--hardware instead")
    weights = load_task_weights(Path(args.task_weights)) if args.task_weights else None
    summary = import_ansor(Dataset(args.dataset), args.work_dir, weights, args.network, args.hardware,
                           progress=not args.quiet)
    print(json.dumps(summary.to_json(), indent=1))
    if not summary.imported and not summary.already_present:
        reasons = ", ".join(f"{reason} ({count})" for reason, count in summary.skipped.most_common(3))
        first = f"; first: {summary.examples[0]}" if summary.examples else ""
        raise DatasetError(f"nothing imported from {', '.join(args.work_dir)}: no usable Ansor record "
                           f"({reasons or 'no records'}){first}")
    return 0


def cmd_dataset_seal(args: argparse.Namespace) -> int:
    from tlp.dataset.best_programs import INDEX_NAME  # pylint: disable=import-outside-toplevel

    dataset = _existing(args.path)
    for platform_id in dataset.platform_ids():
        with dataset.store(platform_id) as store:
            for path in store.seal():
                print(f"{'indexed' if path.name == INDEX_NAME else 'sealed'} {path}")
    return 0


def cmd_dataset_export(args: argparse.Namespace) -> int:
    from tlp.dataset.store import Dataset, DatasetError  # pylint: disable=import-outside-toplevel

    store = Dataset(args.path).store(args.platform)
    if store.platform.record_format != "metaschedule":
        raise DatasetError(f"{args.platform} holds {store.platform.record_format} records (schedule steps), not "
                           "MetaSchedule traces: there is no MetaSchedule database to export")
    workloads, records = store.export_database(Path(args.out))
    print(f"wrote {workloads} and {records} (open with ms.database.JSONDatabase(work_dir={args.out!r}))")
    return 0


def cmd_dataset_verify(args: argparse.Namespace) -> int:
    from tlp.dataset.store import Dataset, DatasetError  # pylint: disable=import-outside-toplevel
    from tlp.dataset.verify import format_verification, verify_dataset  # pylint: disable=import-outside-toplevel

    if not Path(args.path).is_dir():
        raise DatasetError(f"{args.path}: no such dataset folder")
    result = verify_dataset(Dataset(args.path), record_missing=args.record_missing)
    print(json.dumps(result, indent=1) if args.json else format_verification(result))
    if result["clean"]:
        return 0
    if not args.json:
        torn = [p for p in result["problems"] if "unfinished last line" in p["problem"]]
        advice = []
        if len(torn) < len(result["problems"]):
            advice.append("restore damaged files from git (`git checkout -- PATH`), or read around them with "
                          "`tlp dataset info --skip-damaged`")
        if torn:
            advice.append(f"{len(torn)} tail{'s end' if len(torn) > 1 else ' ends'} in an unfinished line (a write "
                          "cut short by a kill; readers leave it out): nothing to restore, the next writer moves it "
                          f"aside, e.g. `tlp dataset seal {args.path}`")
        print(f"tlp: error: {len(result['problems'])} problems in {args.path}: {'; '.join(advice)}", file=sys.stderr)
    return 1  # damage found (2 stays "could not run", as for every TLPError)


def register(verbs: Any) -> None:
    dataset = verbs.add_parser("dataset", help="inspect and manage datasets").add_subparsers(dest="action",
                                                                                              required=True)
    info = dataset.add_parser("info", help="counts and noise of a dataset")
    info.add_argument("path", nargs="?", default=DEFAULT_DATASET)
    info.add_argument("--json", action="store_true")
    info.add_argument("--load-threshold", type=float, default=0.10)
    info.add_argument("--skip-damaged", action="store_true",
                      help="skip damaged segments and report the records lost instead of failing")
    info.set_defaults(func=cmd_dataset_info)
    compare = dataset.add_parser("compare", help="how differently platforms rank the same programs")
    compare.add_argument("path", nargs="?", default=DEFAULT_DATASET)
    compare.add_argument("--platforms", help="comma-separated platform ids (default: all)")
    compare.add_argument("--min-programs", type=int, default=8, help="shared programs a task needs to count")
    compare.add_argument("--json", action="store_true")
    compare.set_defaults(func=cmd_dataset_compare, platform=None)
    imp = dataset.add_parser("import", help="import a MetaSchedule work directory (its JSONDatabase), or Ansor/TenSet "
                                            "record files and folders (--format ansor)")
    imp.add_argument("work_dir", nargs="+", metavar="WORK_DIR|FILE_OR_DIR",
                     help="a MetaSchedule work directory; with --format ansor: record files and/or folders of them "
                          "(TenSet's measure_records/<platform>/)")
    imp.add_argument("--format", choices=["metaschedule", "ansor"], default="metaschedule",
                     help="metaschedule (default) or ansor: Ansor/TenSet measurement records (log v0.2-v0.6)")
    imp.add_argument("--dataset", default=DEFAULT_DATASET)
    imp.add_argument("--network", help="network name for the imported tasks (default: the folder's or file's name)")
    imp.add_argument("--task-weights", metavar="MAPPING.json",
                     help='--format ansor: {"network": {"workload key": weight}}: networks and weights of the tasks '
                          "(TenSet's own network files need old TVM to read); records of other keys are skipped")
    imp.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    where = imp.add_mutually_exclusive_group()
    where.add_argument("--measured-here", action="store_true", help="the logs were measured on this machine")
    where.add_argument("--hardware", help="description of the machine that measured the logs")
    where.add_argument("--platform", metavar="PLATFORM_ID",
                       help="a platform the dataset already has: the logs were measured there (its target must be "
                            "the records')")
    imp.add_argument("--workload", metavar="SOURCE",
                     help="the zoo workload (or file) the run tuned, as given to `tlp tune`: tasks are catalogued "
                          "with its names, networks and weights")
    imp.add_argument("--top-tasks", type=int, default=0, metavar="N", help="with --workload: as `tlp tune --top-tasks`")
    imp.set_defaults(func=cmd_dataset_import)
    seal = dataset.add_parser("seal", help="compress appended records into committed segments")
    seal.add_argument("path", nargs="?", default=DEFAULT_DATASET)
    seal.set_defaults(func=cmd_dataset_seal)
    export = dataset.add_parser("export", help="write one platform as plain MetaSchedule JSONDatabase files")
    export.add_argument("path")
    export.add_argument("--platform", required=True)
    export.add_argument("--out", required=True)
    export.set_defaults(func=cmd_dataset_export)
    verify = dataset.add_parser("verify", help="check every segment and tail for damage (exit 1 when found)")
    verify.add_argument("path", nargs="?", default=DEFAULT_DATASET)
    verify.add_argument("--record-missing", action="store_true",
                        help="record checksums of segments that have none and read cleanly (never rewrites them)")
    verify.add_argument("--json", action="store_true")
    verify.set_defaults(func=cmd_dataset_verify)
