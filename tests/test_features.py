"""Featurization of real MetaSchedule traces into primitive vectors."""

import math

import numpy as np
import pytest

from tlp._tvm import ms
from tlp.features.featurizer import FeatureConfig, TraceFeaturizer, block_extents
from tlp.features.vocab import OOV


@pytest.fixture(scope="module")
def traces(collected, host_platform):
    dataset, _ = collected
    store = dataset.store(host_platform.id)
    programs = [p for p in store.latest_programs().values()]
    extents = {}
    for program in programs:
        if program.workload_key not in extents:
            mod = ms.database.Workload.from_json(store.workload_json(program.workload_key)).mod
            extents[program.workload_key] = block_extents(mod)
    return programs, [extents[p.workload_key] for p in programs]


def test_shapes_padding_and_vocabulary(traces):
    programs, extents = traces
    featurizer = TraceFeaturizer().fit([p.trace_json for p in programs])
    features = featurizer.transform([p.trace_json for p in programs], extents)
    config = featurizer.config
    assert features.shape == (len(programs), config.seq_len, config.width) and features.dtype == np.float32
    for row, program in zip(features, programs):
        length = len(program.trace_json[0])
        assert np.all(row[:length, 0] >= 2)  # every instruction got a known kind id
        assert not row[length:].any()  # padding
    assert {"SamplePerfectTile", "Split", "Annotate"} <= set(featurizer.kinds.tokens)


def test_structure_decisions_and_extents_are_encoded(traces):
    programs, extents = traces
    featurizer = TraceFeaturizer().fit([p.trace_json for p in programs])
    cols = featurizer.config.columns()
    program = next(p for p in programs if any(i[0] == "SamplePerfectTile" for i in p.trace_json[0]))
    insts, decisions = program.trace_json
    program_extents = extents[programs.index(program)]
    row = featurizer.transform_one(program.trace_json, program_extents)
    sample = next(i for i, inst in enumerate(insts) if inst[0] == "SamplePerfectTile")
    factors = dict(decisions)[sample]
    expected = [math.log2(1 + f) for f in factors]
    assert row[sample, cols["numbers"]][: len(factors)] == pytest.approx(expected)
    split = next(i for i, inst in enumerate(insts) if inst[0] == "Split" and i > sample)
    assert math.log2(1 + split - sample) in [pytest.approx(x) for x in row[split, cols["refs"]]]
    # the split's other factor inputs are later outputs of the same sampling instruction
    assert math.log2(1 + split - sample + 1 / 32) in [pytest.approx(x) for x in row[split, cols["refs"]]]
    block = next(i for i, inst in enumerate(insts) if inst[0] == "GetSBlock" and program_extents.get(inst[2][0]))
    assert row[block, cols["numbers"]].any()  # the block's loop extents from the workload


def test_unknown_kinds_and_strings_do_not_shift_other_features(traces):
    programs, _ = traces
    featurizer = TraceFeaturizer().fit([p.trace_json for p in programs])
    insts, decisions = programs[0].trace_json
    altered = [list(i) for i in insts]
    altered[1] = ["SomeFutureInstruction", altered[1][1], ["never-seen-string"], altered[1][3]]
    before = featurizer.transform_one([insts, decisions])
    after = featurizer.transform_one([altered, decisions])
    assert after[1, 0] == OOV and after[1, 1] == OOV
    assert np.array_equal(np.delete(before, 1, axis=0), np.delete(after, 1, axis=0))


def test_empty_and_overlong_traces(traces):
    programs, _ = traces
    featurizer = TraceFeaturizer(FeatureConfig(seq_len=8)).fit([p.trace_json for p in programs])
    assert not featurizer.transform_one([[], []]).any()
    cropped = featurizer.transform_one(programs[0].trace_json)
    assert cropped.shape == (8, featurizer.config.width) and cropped[:, 0].all()


def test_distinct_programs_rarely_collide(traces):
    programs, extents = traces
    featurizer = TraceFeaturizer().fit([p.trace_json for p in programs])
    features = featurizer.transform([p.trace_json for p in programs], extents)
    keys = [(p.workload_key, f.tobytes()) for p, f in zip(programs, features)]
    assert len(set(keys)) >= 0.95 * len(programs)


def test_round_trip_and_version_check(traces):
    programs, _ = traces
    featurizer = TraceFeaturizer().fit([p.trace_json for p in programs])
    loaded = TraceFeaturizer.from_json(featurizer.to_json())
    assert np.array_equal(loaded.transform_one(programs[0].trace_json), featurizer.transform_one(programs[0].trace_json))
    data = featurizer.to_json()
    data["config"]["version"] = 999
    with pytest.raises(ValueError, match="feature version 999"):
        TraceFeaturizer.from_json(data)


def test_a_stored_config_of_the_removed_canonical_names_option_reads_when_it_was_off():
    # Block names without their numbering (canonical_names) ranked worse and went; configs stored before keep
    # loading when they had it off, and one that used it is refused, naming it.
    data = FeatureConfig(seq_len=25, compact=True).to_json()
    assert "canonical_names" not in data
    assert FeatureConfig.from_json({**data, "canonical_names": False}) == FeatureConfig(seq_len=25, compact=True)
    with pytest.raises(ValueError, match=r"canonical block names \(canonical_names=True\), which this TLP no longer"):
        FeatureConfig.from_json({**data, "canonical_names": True})
    with pytest.raises(ValueError, match="field.* colour"):
        FeatureConfig.from_json({**data, "colour": 1})
    featurizer = TraceFeaturizer(FeatureConfig(seq_len=25)).to_json()
    featurizer["config"]["canonical_names"] = True
    with pytest.raises(ValueError, match="canonical"):
        TraceFeaturizer.from_json(featurizer)


def test_feature_report_on_real_programs(collected, host_platform):
    from tlp.features.report import feature_report, format_feature_report, operator_family
    from tlp.features.tensors import load_programs

    dataset, _ = collected
    programs = load_programs(dataset, host_platform.id)
    report = feature_report(programs)
    assert sum(report["length_histogram"].values()) == len(programs.traces)
    assert set(report["configs"]) == {"25x22", "80x22"}
    full, paper = report["configs"]["80x22"], report["configs"]["25x22"]
    assert full["cropped_traces"] == 0.0 and full["collision_rate"] == 0.0  # v2 features separate every program
    assert full["postprocessing_read"] == 1.0  # every stored program was post-processed, and 80 rows read it all
    assert paper["cropped_traces"] > 0.5  # MetaSchedule traces are longer than Ansor's 25
    names = {programs.catalogue[k]["name"] for k in programs.task_keys}
    assert set(paper["families"]) == {operator_family(name) for name in names}
    assert sum(f["programs"] for f in paper["families"].values()) == len(programs.traces)
    # the compact form reads more of each trace in the same 25 rows
    compact = feature_report(programs, FeatureConfig(compact=True))["configs"]["25x22"]
    assert compact["postprocessing_read"] >= paper["postprocessing_read"]
    assert all(compact["families"][f]["rows_median"] < paper["families"][f]["rows_median"] for f in paper["families"])
    text = format_feature_report(report)
    assert "length histogram" in text and "per operator family" in text


def test_row_span_counts_the_rows_a_whole_trace_is_laid_out_in(traces):
    programs, extents = traces
    jsons = [p.trace_json for p in programs]
    for compact in (False, True):
        featurizer = TraceFeaturizer(FeatureConfig(seq_len=200, compact=compact)).fit(jsons)
        postproc = featurizer.config.columns()["postproc"].start
        for trace, rows in zip(jsons, featurizer.transform(jsons, extents)):
            span, start = featurizer.row_span(trace)
            assert span == int((rows[:, 0] != 0).sum())  # every laid-out row has a kind; padding has none
            assert start == int(np.argmax(rows[:, postproc] > 0))  # the first row the post-processing flag marks


def test_operator_family_drops_numbering_and_shapes():
    from tlp.features.report import operator_family

    assert operator_family("fused_conv2d20_add25_tir_clip8") == "fused_conv2d_add_tir_clip"
    assert operator_family("conv2d_nchw_1x64x56x56_o64_k3_s1_p1_d1") == "conv2d_nchw"
    assert operator_family("layer_norm_128x768") == operator_family("layer_norm") == "layer_norm"
    assert operator_family("matmul1") == "matmul" and operator_family("take") == "take"


def test_compact_form_leaves_out_bookkeeping_and_keeps_decisions_in_their_rows(traces):
    from tlp.features.featurizer import BOOKKEEPING_KINDS, COUNTED_KINDS

    programs, extents = traces
    full = TraceFeaturizer().fit([p.trace_json for p in programs])
    compact = TraceFeaturizer(FeatureConfig(compact=True), full.kinds, full.strings)
    cols = full.config.columns()
    program = next(p for p in programs if any(i[0] == "Fuse" for i in p.trace_json[0]))
    insts, decisions = program.trace_json
    program_extents = extents[programs.index(program)]
    kept = [i for i, inst in enumerate(insts) if inst[0] not in BOOKKEEPING_KINDS]
    assert 0 < len(kept) < len(insts)
    rows = compact.transform_one(program.trace_json, program_extents)
    before = full.transform_one(program.trace_json, program_extents)
    assert rows[: len(kept), 0].all() and not rows[len(kept):].any()
    assert [full.kinds.tokens[int(k) - 2] for k in rows[: len(kept), 0]] == [insts[i][0] for i in kept]
    for row, i in enumerate(kept):
        kind = insts[i][0]
        if kind in COUNTED_KINDS:  # how many loops it fuses or reorders, after its other numbers
            loops = sum(1 for x in insts[i][1] if isinstance(x, str) and not x.startswith('"'))
            numbers = rows[row, cols["numbers"]]
            assert math.log2(1 + loops) in [pytest.approx(x) for x in numbers]
        else:  # the same row as in the full form: decisions, links (distances in the whole trace), extents
            assert np.array_equal(rows[row], before[i]), kind
    decided = [i for i, _ in decisions if i in kept]
    assert decided and all(rows[kept.index(i), cols["numbers"]].any() for i in decided)
    # Old checkpoints' configs have no "compact": they read the full form.
    data = full.to_json()
    del data["config"]["compact"]
    assert not TraceFeaturizer.from_json(data).config.compact


def test_features_command_reports_the_compact_crop(collected, host_platform):
    from conftest import tlp_cli

    dataset, _ = collected
    result = tlp_cli(["features", str(dataset.path), "--platform", host_platform.id, "--compact-traces",
                      "--seq-len", "40"], check=True)
    assert "crop 40x22 (compact rows (bookkeeping left out))" in result.stdout
    assert "per operator family" in result.stdout
