"""Damaged segments: a clear error naming the file, `tlp dataset verify`, and reading around the damage."""

import hashlib
import json

import pytest

from tlp.cli import main
from tlp.dataset.store import LOST_WORKLOAD, Dataset, DatasetError, MeasuredProgram, ReadReport
from tlp.dataset.table import DamagedSegment, Table
from tlp.platform import Platform

PLATFORM = Platform({"kind": "llvm", "mcpu": "test-cpu", "num-cores": 2}, {"cpu_model": "test"})


def flip_byte(path, where=0.5):
    data = bytearray(path.read_bytes())
    data[int(len(data) * where)] ^= 0x01
    path.write_bytes(bytes(data))


def sealed_table(tmp_path, batches=(["1", "2"], ["3", "4", "5"], ["6"])):
    """A table of JSON lines with one segment per batch and an empty tail."""
    table = Table(tmp_path / "t.json")
    for batch in batches:
        table.append(batch)
        table.seal()
    return table


def read(table, **kwargs):
    return [line for _, line in table.lines(**kwargs)]


def test_seal_records_checksum_and_line_count(tmp_path):
    table = sealed_table(tmp_path)
    manifest = json.loads((tmp_path / "t.json.sha256.json").read_text())
    entry = manifest["segments"]["t.json.0002.xz"]
    assert entry["lines"] == 3
    assert entry["sha256"] == hashlib.sha256((tmp_path / "t.json.0002.xz").read_bytes()).hexdigest()
    assert [c.status for c in table.check()] == ["ok", "ok", "ok", "ok"]  # three segments and the tail


@pytest.mark.parametrize("damage", ["flip", "flip-unrecorded", "truncate", "missing"])
def test_damaged_segment_is_a_clear_error_naming_the_file(tmp_path, damage):
    table = sealed_table(tmp_path)
    segment = tmp_path / "t.json.0002.xz"
    if damage == "flip-unrecorded":
        (tmp_path / "t.json.sha256.json").unlink()  # sealed before checksums existed: xz's own checks catch it
    if damage == "truncate":
        segment.write_bytes(segment.read_bytes()[:-10])
    elif damage == "missing":
        segment.unlink()  # the manifest still knows it: no silent shift of the lines after it
    else:
        flip_byte(segment)
    with pytest.raises(DamagedSegment, match=r"t\.json\.0002\.xz: damaged segment .*git checkout -- ") as error:
        read(table)
    assert isinstance(error.value, DatasetError)  # the CLI prints it as one `tlp: error:` line
    assert error.value.damage.lines == (None if damage == "flip-unrecorded" else 3)


def test_skipping_reads_the_rest_and_counts_the_lost_lines(tmp_path):
    table = sealed_table(tmp_path)
    table.append(["7"])
    flip_byte(tmp_path / "t.json.0002.xz")
    lost = []
    assert read(table, on_damage=lost.append) == ["1", "2", "6", "7"]
    assert [(d.path.name, d.lines) for d in lost] == [("t.json.0002.xz", 3)]


def test_check_reports_every_problem(tmp_path):
    table = sealed_table(tmp_path)
    flip_byte(tmp_path / "t.json.0001.xz")
    with open(tmp_path / "t.json", "a") as handle:
        handle.write("not json\n")
        handle.write('{"cut sh')
    checks = {c.path.name: c for c in table.check()}
    assert checks["t.json.0001.xz"].status == "damaged"
    assert "checksum mismatch" in checks["t.json.0001.xz"].problems[0]
    assert checks["t.json.0002.xz"].status == "ok"
    assert checks["t.json"].status == "damaged"
    assert any("unfinished last line" in p for p in checks["t.json"].problems)
    assert "line 1 is not valid JSON" in checks["t.json"].problems


def test_kill_between_segment_and_manifest_is_not_damage(tmp_path, monkeypatch):
    table = sealed_table(tmp_path, batches=(["1"],))
    table.append(["2", "3"])

    def killed(*_):
        raise KeyboardInterrupt  # stands for kill -9 right after the segment's rename

    monkeypatch.setattr(Table, "_record", killed)
    with pytest.raises(KeyboardInterrupt):
        table.seal()
    monkeypatch.undo()
    checks = {c.path.name: c for c in table.check()}
    assert checks["t.json.0002.xz"].status == "unrecorded" and not checks["t.json.0002.xz"].problems
    # The seal's journal says the tail still holds the segment's lines: the segment goes, the next seal redoes it.
    assert any("cut short" in action for action in table.repair())
    assert read(table) == ["1", "2", "3"]
    assert [c.status for c in table.check()] == ["ok", "ok"]
    table.seal()
    assert read(table) == ["1", "2", "3"] and [c.status for c in table.check()] == ["ok", "ok", "ok"]


def test_old_segments_verify_as_unrecorded_and_get_recorded_without_rewrite(tmp_path):
    table = sealed_table(tmp_path)
    (tmp_path / "t.json.sha256.json").unlink()  # as in datasets sealed before checksums existed
    flip_byte(tmp_path / "t.json.0003.xz")
    before = {p.name: p.read_bytes() for p in table.segments()}
    assert [c.status for c in table.check()] == ["unrecorded", "unrecorded", "damaged", "ok"]
    assert [p.name for p in table.record_missing()] == ["t.json.0001.xz", "t.json.0002.xz"]  # not the damaged one
    assert {p.name: p.read_bytes() for p in table.segments()} == before
    assert [c.status for c in table.check()] == ["ok", "ok", "damaged", "ok"]


# ---- store and command line ----------------------------------------------------------------------------------
def program(key, n, run_secs):
    return MeasuredProgram(key, [[["GetSBlock", [], ["C", "main"], ["b0"]]], [[0, n]]], [], run_secs)


def damaged_store(tmp_path, record_missing=True):
    """Workload A sealed alone in workload segment 0001, B in 0002; one record of each, A's in records segment 1."""
    store = Dataset(tmp_path).store_for(PLATFORM)
    with store:
        store.add_workload(["A", "ZmFrZQ=="])
        store.append([program("A", 1, [1e-3])])
        store.seal()
        store.add_workload(["B", "ZmFrZQ=="])
        store.append([program("B", 2, [2e-3]), program("B", 3, [3e-3])])
        store.seal()
    if not record_missing:
        for table in store.tables():
            table.manifest_path.unlink()
    flip_byte(store.workloads.segments()[0])
    return store


def test_skipped_workload_segment_keeps_later_indices_right(tmp_path):
    damaged_store(tmp_path)
    with pytest.raises(DamagedSegment, match="database_workload.json.0001.xz"):
        list(Dataset(tmp_path).store(PLATFORM.id).iter_programs())
    report = ReadReport()
    programs = list(Dataset(tmp_path, skip_damaged=True).store(PLATFORM.id).iter_programs(report))
    assert [(p.workload_key, p.latency) for p in programs] == [("B", pytest.approx(2e-3)), ("B", pytest.approx(3e-3))]
    assert report.skipped[LOST_WORKLOAD] == 1
    assert [d.path.name for d in report.damaged] == ["database_workload.json.0001.xz"]


def test_skipped_workload_segment_of_unknown_length_is_an_error(tmp_path):
    damaged_store(tmp_path, record_missing=False)
    with pytest.raises(DatasetError, match="unknown length"):
        list(Dataset(tmp_path, skip_damaged=True).store(PLATFORM.id).iter_programs())


def test_cli_verify_and_info_skip_damaged(tmp_path, capsys):
    store = damaged_store(tmp_path)
    records = store.records.segments()[1]
    flip_byte(records)
    assert main(["dataset", "info", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("tlp: error: ") and "database_workload.json.0001.xz" in error and "Traceback" not in error

    assert main(["dataset", "info", str(tmp_path), "--skip-damaged", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)["per_platform"][PLATFORM.id]
    assert info["lost_records"] == 3  # two in the damaged record segment, one whose workload was lost
    assert info["records"] == 0

    assert main(["dataset", "verify", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"{records}: checksum mismatch" in out and "2 damaged" in out

    assert main(["dataset", "verify", str(tmp_path), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert not result["clean"] and {p["path"] for p in result["problems"]} == {
        str(records), str(store.workloads.segments()[0])}


def test_cli_verify_clean_dataset_and_record_missing(tmp_path, capsys):
    store = damaged_store(tmp_path, record_missing=False)
    segment = store.workloads.segments()[0]
    flip_byte(segment)  # flipped back: the segment as sealed (what `git checkout` would restore)
    assert main(["dataset", "verify", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "database_workload.json: no checksum recorded for segments 0001, 0002" in out and "0 problems" in out

    sealed = segment.read_bytes()
    segment.write_bytes(b"")  # an empty file is damage too
    assert main(["dataset", "verify", str(tmp_path), "--record-missing"]) == 1
    assert f"{segment}: truncated" in capsys.readouterr().out
    assert segment.name not in store.workloads.manifest()  # a damaged segment is never given a checksum
    segment.write_bytes(sealed)
    assert main(["dataset", "verify", str(tmp_path), "--record-missing"]) == 0
    assert f"recorded the checksum of {segment}" in capsys.readouterr().out
    assert main(["dataset", "verify", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["segments_unrecorded"] == 0


def test_a_torn_tail_line_is_reported_by_info_and_verify_says_the_next_writer_moves_it(tmp_path, capsys):
    # verify told a torn tail line to "restore from git" while its own line said the next writer moves it aside;
    # dataset info said nothing about it.
    store = Dataset(tmp_path).store_for(PLATFORM)
    with store:
        store.add_workload(["A", "ZmFrZQ=="])
        store.append([program("A", 1, [1e-3]), program("A", 2, [2e-3])])
    with open(store.records.tail, "a") as handle:
        handle.write('[0, [[["Sample')  # a kill in the middle of a write
    assert main(["dataset", "info", str(tmp_path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)["per_platform"][PLATFORM.id]
    assert info["records"] == 2 and any("unfinished last line" in reason for reason in info["skipped_lines"])
    assert main(["dataset", "info", str(tmp_path)]) == 0
    assert "unfinished last line" in capsys.readouterr().out
    assert main(["dataset", "verify", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "the next writer moves it aside" in captured.err and "git" not in captured.err
    assert main(["dataset", "seal", str(tmp_path)]) == 0  # the next writer
    capsys.readouterr()
    assert main(["dataset", "verify", str(tmp_path)]) == 0
