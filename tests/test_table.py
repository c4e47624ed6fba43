import lzma

from tlp.dataset.table import Table


def read(table):
    return [line for _, line in table.lines()]


def test_append_seal_and_read_in_order(tmp_path):
    table = Table(tmp_path / "t.json")
    table.append(["a", "b"])
    assert table.seal().name == "t.json.0001.xz"
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
