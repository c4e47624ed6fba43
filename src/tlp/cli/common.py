"""What the verbs share: the target and platform options, ``--set KEY=VALUE``, and renamed options kept as aliases."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tlp.dataset.store import DEFAULT_DATASET

__all__ = ["DEFAULT_DATASET", "add_renamed", "add_settings", "add_target_args", "networks", "platform_of",
           "target_of", "train_platforms"]


def add_target_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", help='JSON target, e.g. \'{"kind": "llvm", "mcpu": "znver3", "num-cores": 2}\' '
                        "(default: this machine; without num-cores: this machine's physical cores)")


def add_settings(parser: argparse.ArgumentParser, what: str) -> None:
    """``--set KEY=VALUE`` (repeatable): ``what`` says where the keys come from."""
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                        help=f"an internal setting by name ({what}); repeatable; an unknown key lists them all")


class _Renamed(argparse.Action):
    """An option that became ``--set KEY=VALUE``: still accepted for one release, with a deprecation message."""

    def __init__(self, option_strings: list[str], dest: str, key: str = "", constant: str | None = None,
                 **kwargs: Any) -> None:
        self.key, self.constant = key, constant
        super().__init__(option_strings, dest, nargs=0 if constant is not None else None, help=argparse.SUPPRESS,
                         **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        value = self.constant if self.constant is not None else values
        print(f"tlp: {option_string} is deprecated and goes in the next release: use --set {self.key}={value}",
              file=sys.stderr)
        namespace.settings = [*(getattr(namespace, "settings", None) or []), f"{self.key}={value}"]


def add_renamed(parser: argparse.ArgumentParser, renamed: dict[str, str]) -> None:
    """Hidden aliases: ``{"--old-option": "key"}`` (takes a value) or ``{"--no-thing": "key=false"}`` (a flag)."""
    for option, key in renamed.items():
        name, _, constant = key.partition("=")
        parser.add_argument(option, action=_Renamed, key=name, constant=constant or None, dest="renamed_" + name)


def target_of(args: argparse.Namespace) -> dict[str, Any]:
    """``--target``'s JSON, else this machine. An LLVM target measured here without ``num-cores`` gets this
    machine's physical cores, as the default target does; its ``mcpu`` must be a CPU LLVM knows (one line if not)."""
    # pylint: disable=import-outside-toplevel
    from tlp.platform import check_llvm_target, host_target, parse_target

    if not args.target:
        return host_target()
    target = parse_target(args.target)
    if target.get("kind") == "llvm" and not target.get("num-cores") and not getattr(args, "rpc_tracker", None):
        target = parse_target({**target, "num-cores": host_target()["num-cores"]})
    check_llvm_target(target)
    return target


def networks(names: str | None) -> tuple[str, ...]:
    """A comma-separated list of network names; ``held-out`` stands for the standard test networks."""
    from tlp.workloads import held_out_networks  # pylint: disable=import-outside-toplevel

    result: list[str] = []
    for name in filter(None, (n.strip() for n in (names or "").split(","))):
        result += held_out_networks() if name == "held-out" else [name]
    return tuple(result)


def platform_of(dataset: Any, requested: str | None) -> str:
    """The requested platform, else the dataset's only one."""
    from tlp.dataset.store import DatasetError  # pylint: disable=import-outside-toplevel

    if requested:
        return requested
    platforms = dataset.platform_ids()
    if not platforms:
        raise DatasetError(f"{dataset.path}: no such dataset folder" if not dataset.path.is_dir() else
                           f"{dataset.path}: no platform stored here yet (tlp collect or tlp dataset import first)")
    if len(platforms) != 1:
        raise DatasetError(f"{dataset.path}: {len(platforms)} platforms ({', '.join(platforms) or 'none'}); "
                           "choose one with --platform")
    return platforms[0]


def train_platforms(dataset: Any, args: argparse.Namespace) -> list[str]:
    """``--platforms A,B`` / ``all``, else ``--platform``, else the dataset's only platform."""
    from tlp.dataset.store import DatasetError  # pylint: disable=import-outside-toplevel

    if not args.platforms:
        return [platform_of(dataset, args.platform)]
    if not dataset.path.is_dir():
        raise DatasetError(f"{dataset.path}: no such dataset folder")
    known = dataset.platform_ids()
    wanted = known if args.platforms == "all" else [p for p in args.platforms.split(",") if p]
    unknown = [p for p in wanted if p not in known]
    if unknown or not wanted:
        raise DatasetError(f"{dataset.path}: no platform {', '.join(unknown) or '(none given)'} "
                           f"(platforms here: {', '.join(known) or 'none'})")
    return wanted
