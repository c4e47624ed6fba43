"""The front-door documents stay short: README.md, DATASET.md and the model card are read first, not research logs."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MODEL_CARD = ROOT / "src" / "tlp" / "models" / "MODEL_CARD.md"
DATASET_CARD = ROOT / "DATASET.md"


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_readme_is_short_with_short_lines():
    lines = _lines(README)
    assert len(lines) <= 150, f"README.md has {len(lines)} lines (at most 150)"
    long = [(number, len(line)) for number, line in enumerate(lines, 1) if len(line) > 200]
    assert not long, f"README.md lines over 200 characters (line, length): {long}"


def test_model_card_and_dataset_card_are_short():
    for path in (MODEL_CARD, DATASET_CARD):
        count = len(_lines(path))
        assert count <= 150, f"{path.relative_to(ROOT)} has {count} lines (at most 150)"


def test_readme_has_no_dates_or_benchmark_section_citations():
    text = README.read_text(encoding="utf-8")
    dates = re.findall(r"20\d\d-\d\d-\d\d", text)
    assert not dates, f"README.md has dates: {dates}"
    # Section citations such as `benchmarks/README.md ("Whole networks")` or `benchmarks/README.md, section X`;
    # a plain link to benchmarks/README.md is fine.
    citations = re.findall(r"benchmarks/README(?:\.md)?`?\)?[,:]?\s*(?:section\b|\(?\s*[\"“])", text)
    assert not citations, f"README.md cites benchmarks/README.md sections: {citations}"
