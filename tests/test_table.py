import lzma

import pytest

from tlp.dataset.table import DatasetError, Table


def read(table):
    return [line for _, line in table.lines()]


def test_append_seal_and_read_in_order(tmp_path):
    table = Table(tmp_path / "t.json")
    table.append(["a", "b"])
    assert [p.name for p in table.seal()] == ["t.json.0001.xz"]
    table.append(["c"])
    table.seal()
    table.append(["d"])
    assert read(table) == ["a", "b", "c", "d"]
    assert [p.name for p in table.segments()] == ["t.json.0001.xz", "t.json.0002.xz"]
    assert (tmp_path / "t.json").read_text() == "d\n"


def test_partial_last_line_is_quarantined_not_lost(tmp_path):
    table = Table(tmp_path / "t.json")
    table.append(["complete"])
    with open(tmp_path / "t.json", "a") as handle:
        handle.write('{"cut short')  # what kill -9 in the middle of a write leaves
    assert read(table) == ["complete"]  # readers ignore it
    actions = table.repair()
    assert len(actions) == 1 and "partial" in actions[0]
    quarantined = list(tmp_path.glob("t.json.partial-*"))
    assert quarantined and quarantined[0].read_text() == '{"cut short'
    table.append(["next"])
    assert read(table) == ["complete", "next"]


def test_crash_between_seal_and_truncate_is_undone(tmp_path):
    table = Table(tmp_path / "t.json")
    table.append(["x", "y"])
    data = (tmp_path / "t.json").read_bytes()
    with lzma.open(tmp_path / "t.json.0001.xz", "wb") as handle:  # segment written, tail not yet emptied
        handle.write(data)
    assert read(table) == ["x", "y", "x", "y"]
    assert any("already sealed" in a for a in table.repair())
    assert read(table) == ["x", "y"]


def test_a_large_tail_seals_into_segments_of_bounded_text(tmp_path, monkeypatch):
    # A reader decodes a whole segment: an import of a million records must not make one segment of gigabytes.
    from tlp.dataset import table as table_module

    monkeypatch.setattr(table_module, "SEGMENT_BYTES", 64)
    table = Table(tmp_path / "t.json")
    lines = [f'{{"n": {i}}}' for i in range(40)] + ['"' + "x" * 150 + '"'] + ['{"last": 1}']
    table.append(lines)
    made = table.seal()
    assert len(made) > 5 and read(table) == lines
    sizes = [len(lzma.decompress(p.read_bytes())) for p in made]
    assert max(sizes[:-2]) <= 64 and 150 < max(sizes)  # the long line is a segment of its own
    assert not table.journal_path.exists() and (tmp_path / "t.json").read_text() == ""
    assert all(check.status == "ok" for check in table.check())


def test_a_seal_cut_short_before_the_tail_is_emptied_is_undone(tmp_path, monkeypatch):
    from tlp.dataset import table as table_module

    monkeypatch.setattr(table_module, "SEGMENT_BYTES", 16)
    table = Table(tmp_path / "t.json")
    table.append(["a"])
    table.seal()
    table.append([f'"line {i}"' for i in range(10)])

    def killed(self):
        raise KeyboardInterrupt  # a kill after the segments were written and recorded

    monkeypatch.setattr(Table, "_truncate_tail", killed)
    try:
        table.seal()
    except KeyboardInterrupt:
        pass
    monkeypatch.undo()
    assert table.journal_path.exists() and len(table.segments()) > 2
    assert any("cut short" in action for action in table.repair())
    assert [p.name for p in table.segments()] == ["t.json.0001.xz"] and list(table.manifest()) == ["t.json.0001.xz"]
    assert read(table) == ["a"] + [f'"line {i}"' for i in range(10)]
    assert table.seal() and read(table) == ["a"] + [f'"line {i}"' for i in range(10)]


def test_a_seal_cut_short_after_the_tail_was_emptied_is_finished(tmp_path):
    table = Table(tmp_path / "t.json")
    table.append(["a", "b"])
    table.seal()
    table.journal_path.write_text('{"first_segment": 1}')  # a kill before the journal was removed...
    table.manifest_path.unlink()  # ...and, earlier, before the checksums were recorded
    assert any("finished" in action for action in table.repair())
    assert list(table.manifest()) == ["t.json.0001.xz"] and not table.journal_path.exists()
    assert read(table) == ["a", "b"]


def test_a_failed_seal_leaves_no_segment_and_every_line_in_the_tail(tmp_path, monkeypatch):
    from tlp.dataset import table as table_module

    monkeypatch.setattr(table_module, "SEGMENT_BYTES", 16)
    table = Table(tmp_path / "t.json")
    table.append([f'"line {i}"' for i in range(10)])
    written = table_module._write_segment

    def full_disk_on_the_third(segment, data):
        if segment.name.endswith("0003.xz"):
            raise OSError(28, "No space left on device", str(segment))
        return written(segment, data)

    monkeypatch.setattr(table_module, "_write_segment", full_disk_on_the_third)
    with pytest.raises(DatasetError, match="No space left on device"):
        table.seal()
    assert table.segments() == [] and not table.journal_path.exists()
    assert read(table) == [f'"line {i}"' for i in range(10)]
