"""The repository stays light and its benchmark pages stay readable (benchmarks/README.md, "Rules")."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_BYTES = 2_000_000  # 2 MB
LARGE_FILES_ALLOWED_UNDER = ("datasets/", "src/tlp/models/")
BENCHMARKS_INDEX = ROOT / "benchmarks" / "README.md"
RESULTS = ROOT / "docs" / "results.md"
RESULTS_SECTIONS = ("Headline", "Ranking", "Search", "Whole networks", "Models", "MTL-TLP", "Scoring speed",
                    "Reliability", "Data")


def tracked_files() -> list[str]:
    """Paths ``git ls-files`` lists, relative to the repository root; skips the test outside a git checkout."""
    try:
        done = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False)
    except FileNotFoundError:
        pytest.skip("git is not installed")
    if done.returncode != 0:
        pytest.skip("not a git checkout")
    return [p for p in done.stdout.decode("utf-8", "surrogateescape").split("\0") if p]


def test_no_tracked_file_outside_datasets_and_models_exceeds_2_mb():
    too_large = []
    for path in tracked_files():
        if path.startswith(LARGE_FILES_ALLOWED_UNDER):
            continue
        file = ROOT / path
        if file.is_symlink() or not file.is_file():  # a link, or deleted in the work tree
            continue
        size = file.stat().st_size
        if size > MAX_BYTES:
            too_large.append(f"{path} ({size / 1e6:.1f} MB)")
    assert not too_large, ("tracked files over 2 MB outside datasets/ and src/tlp/models/ (measured programs go into "
                           "the dataset, run archives stay out of git): " + ", ".join(too_large))


def test_benchmarks_track_no_run_archives_score_arrays_or_checkpoints():
    archive = re.compile(r"\.(tar(\.\w+)?|tgz|npz|pt|pth)$")
    found = [p for p in tracked_files() if p.startswith("benchmarks/") and archive.search(p)]
    assert not found, "benchmarks/ commits summaries and plots only: " + ", ".join(found)


def test_benchmarks_index_is_short():
    lines = BENCHMARKS_INDEX.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"benchmarks/README.md has {len(lines)} lines (at most 150: details go to the studies)"
    long = [n for n, line in enumerate(lines, 1) if len(line) > 200]
    assert not long, f"benchmarks/README.md lines over 200 characters: {long}"


def test_results_page_has_the_sections_others_link_to():
    text = RESULTS.read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+?)\s*$", text, flags=re.MULTILINE)
    missing = [s for s in RESULTS_SECTIONS if s not in headings]
    assert not missing, f"docs/results.md lacks the sections {missing}"
    headline = text.split("## Headline", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in headline.splitlines() if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line)]
    body = rows[1:]  # the header row first
    assert 0 < len(body) <= 8, f"the headline table has {len(body)} rows (1 to 8)"
    for row in body:
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        assert all(len(cell) <= 120 for cell in cells), f"a headline cell over 120 characters: {row}"
        assert "](../benchmarks/" in row, f"a headline row without a link to its study folder: {row}"
