"""Failures that explain themselves, and the report's data: each failure names its op,
vector (or sweep case, or example), the input element(s) behind the first mismatch,
expected and got with their bits, the flags with their bug text and the spec section;
a bounded op shows the precision it was judged at, and says when the error fits
another precision's bound; the JSON report validates against spec/report.schema.json."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from corpus.formats_impls import HALF_AWAY
from ref.attention.emulate import attend as attend_emulated
from ref.conformance.catalog import discover, flags
from ref.conformance.implementation import Implementation
from ref.conformance.report import RATIO_EDGES, Failure, OpReport, Report, version_holds
from ref.conformance.runner import parse_entries, run
from ref.formats import encode, get_format
from ref.testing.vector_files import load_manifest, load_vectors

ROOT = Path(__file__).resolve().parents[1]
ENCODE = "formats.float8_e4m3fn.encode"
ATTEND = "attention.attend"
ENCODE_VECTORS = load_manifest()["ops"][ENCODE]["vectors"]
ALL = {"sink_in_lse": ["included", "excluded"]}


def _f32_bits(x: float) -> str:
    return "0x" + struct.pack(">f", x).hex()


@pytest.fixture(scope="module")
def half_away():
    report = run(HALF_AWAY, ops=[ENCODE], examples=10)
    (row,) = report.ops
    assert row.verdict == "fail"
    return report, row


def test_a_vector_failure_shows_the_input_element_expected_and_got_with_bits_flags_and_spec(half_away):
    _, row = half_away
    e4m3 = get_format("float8_e4m3fn")
    tie = e4m3.min_subnormal / 2  # halfway between 0 and the smallest subnormal: even is 0
    by_where = {f.where: f for f in row.failures}
    f = next(f for f in row.failures if f.vector is not None and f.inputs.get("x", "").endswith(
        f"= {tie!r} (float32 {_f32_bits(tie)})"))
    assert f.where == f"vector {f.vector}" and f.op == ENCODE and f.spec == "spec/formats.md#encode"
    assert f.expected == "0x0 = 0.0" and f.got == f"0x1 = {e4m3.min_subnormal!r}"
    assert (f.expected_bits, f.got_bits) == ("0.0000.000", "0.0000.001")
    assert "TiesToEven" in f.flags and f.flag_text["TiesToEven"] == flags()["TiesToEven"].bug
    text = f.describe()
    for part in (ENCODE, f"vector {f.vector}", f.comment, f"input x[{f.index[0]}] = {tie!r}",
                 "expected 0x0 = 0.0, got 0x1", "bits 0.0000.000 vs 0.0000.001",
                 f"TiesToEven: catches {flags()['TiesToEven'].bug}", "spec: spec/formats.md#encode"):
        assert part in text, (part, text)
    assert by_where  # every failure is one of these structured records


def test_sweep_and_property_failures_carry_the_flags_of_the_failing_element(half_away):
    _, row = half_away
    sweep = next(f for f in row.failures if f.where.startswith("exhaustive case"))
    x = float(sweep.inputs["x"].split(" = ")[1].split(" ")[0])
    assert sweep.index is not None and sweep.expected is not None and sweep.got is not None
    # the failing element is a tie of E4M3 (a half-away encoder fails only on ties): its class names it
    neighbours = encode(np.array([np.nextafter(np.float32(x), np.float32(-np.inf)),
                                  np.nextafter(np.float32(x), np.float32(np.inf))]), "float8_e4m3fn")
    assert neighbours[0] != neighbours[1] and "TiesToEven" in sweep.flags
    assert set(sweep.flag_text) == set(sweep.flags) and sweep.spec == "spec/formats.md#encode"
    prop = next(f for f in row.failures if f.where == "property")
    assert prop.flags and prop.index is not None and prop.inputs and "TiesToEven" in prop.flags


def test_a_failing_vector_stops_the_property_phase_from_shrinking(half_away):
    _, row = half_away
    prop = next(f for f in row.failures if f.where == "property")
    assert "not shrunk" in prop.comment and "minimal" not in prop.comment


def test_an_unnamed_property_failure_is_still_shrunk():
    skips = parse_entries("\n".join(f"{ENCODE}/{i} every vector skipped: only the examples run"
                                    for i in range(1, ENCODE_VECTORS + 1)))
    skips += parse_entries(f"{ENCODE}/exhaustive the sweep skipped too")
    (row,) = run(HALF_AWAY, ops=[ENCODE], examples=30, skips=skips).ops
    (prop,) = row.failures
    assert prop.where == "property" and prop.comment.startswith("minimal failing example")


def test_an_xfail_on_the_properties_stops_shrinking():
    xfails = parse_entries(f"{ENCODE}/properties ties round away here")
    skips = parse_entries("\n".join(f"{ENCODE}/{i} vectors skipped" for i in range(1, ENCODE_VECTORS + 1)))
    skips += parse_entries(f"{ENCODE}/exhaustive the sweep skipped too")
    (row,) = run(HALF_AWAY, ops=[ENCODE], examples=30, skips=skips, xfails=xfails).ops
    assert row.verdict == "xfail" and "not shrunk" in row.xfailed[0].comment


def test_an_accepted_invalid_input_is_named():
    def lenient(x, **params):  # converts whatever it is given
        with np.errstate(all="ignore"):
            return encode(np.asarray(x, dtype=np.float32), "float8_e4m3fn", **params)

    (row,) = run(Implementation("lenient", {ENCODE: lenient}), ops=[ENCODE], examples=0).ops
    accepted = [f for f in row.failures if "accepted an input the spec says is invalid" in f.detail]
    assert accepted, [f.describe() for f in row.failures]
    for f in accepted:
        (shown,) = f.inputs.values()
        dtype = shown.split("[")[0]
        assert dtype not in ("float16", "float32", "float64") and f.comment in f.detail
        assert f"input x: {shown}" in f.describe() and "InvalidInput" in f.flag_text and f.vector is not None
    # a large invalid input: its non-finite values (the first one's index) and its range
    def no_check(w, **params):
        return np.zeros(np.shape(w), np.uint8), np.ones(1, np.float32), np.zeros(1, np.uint8)

    (row,) = run(Implementation("lenient", {"formats.int4_group.quantize": no_check}),
                 ops=["formats.int4_group.quantize"], examples=0).ops
    inf = next(f for f in row.failures if "Infinity" in f.flags and "accepted" in f.detail)
    w = inf.inputs["w"]
    assert w.startswith("float32[1, 128], 1 non-finite (first w[0, 3] = inf (float32 0x7f800000))"), w
    assert "finite values in [" in w and "np.float64" not in w


def _upcast(**kw):
    """A kernel that computes at bfloat16 and returns float32: judged at float32."""
    out, lse = attend_emulated("bfloat16", **kw)
    return np.asarray(out, np.float32), np.asarray(lse, np.float32)


def test_a_bounded_failure_names_its_precision_and_the_precision_whose_bound_it_fits():
    impl = Implementation("upcast", {ATTEND: _upcast}, variants={ATTEND: ALL})
    (row,) = run(impl, ops=[ATTEND], examples=3).ops
    assert row.verdict == "fail" and row.precision == "float32" and "float32" in Report({}, [row], {}).table()
    hinted = [f for f in row.failures if f.hint]
    assert hinted and all(f.precision == "float32" for f in row.failures if f.expected is not None)
    f = hinted[0]
    assert "the error fits the bfloat16 bound" in f.hint
    assert 'declare PRECISION = {"attention.attend": "bfloat16"}' in f.hint and f.hint in f.describe()
    assert "judged at float32" in f.describe() and f.inputs and f.index is not None
    # the hint is true: declared bfloat16, the same kernel passes
    declared = Implementation("upcast", {ATTEND: _upcast}, variants={ATTEND: ALL}, precision={ATTEND: "bfloat16"})
    (ok,) = run(declared, ops=[ATTEND], examples=3).ops
    assert ok.verdict == "pass" and ok.precision == "bfloat16"


@pytest.mark.parametrize("via", ["float16", "bfloat16"])
def test_an_encoder_that_narrows_its_input_first_is_diagnosed(via):
    """A kernel that converts float32 -> float16 (or bfloat16) -> FP8 rounds twice: its
    failures say so, and name the precision; a kernel wrong some other way (truncating)
    gets no such hint."""
    from ref.formats import decode, round_to

    def narrowed(x, **kw):
        if np.asarray(x).dtype.kind != "f":
            raise TypeError("x: expected floats")
        return encode(round_to(x, via), "float8_e4m3fn", **kw)

    def truncating(x, **kw):
        if np.asarray(x).dtype.kind != "f":
            raise TypeError("x: expected floats")
        codes = encode(x, "float8_e4m3fn", **kw)
        far = np.abs(decode(codes, "float8_e4m3fn")) > np.abs(np.asarray(x, np.float64))
        return np.where(far & (codes & 0x7F > 0) & (codes & 0x7F < 0x7E), codes - 1, codes).astype(codes.dtype)

    (row,) = run(Implementation("narrowed", {ENCODE: narrowed}), ops=[ENCODE], examples=5).ops
    assert row.verdict == "fail"
    compared = [f for f in row.failures if f.expected is not None]
    assert compared and all(f"first rounded to {via}:" in f.hint for f in compared)  # the one every failure fits
    assert f"first rounded to {via}" in compared[0].describe()
    (other,) = run(Implementation("truncating", {ENCODE: truncating}), ops=[ENCODE], examples=5).ops
    assert other.verdict == "fail" and not any("first rounded" in f.hint for f in other.failures)


def _upcast_nan_on_long_keys(**kw):
    """The upcasting kernel with a second bug: NaN in the first output row when there are
    more than 4 keys."""
    out, lse = _upcast(**kw)
    if np.shape(kw["k"])[1] > 4 and out.size:
        out = out.copy()
        out.reshape(-1)[0] = np.nan
    return out, lse


def test_a_second_bug_s_nan_does_not_hide_the_precision_hint():
    impl = Implementation("upcast+nan", {ATTEND: _upcast_nan_on_long_keys}, variants={ATTEND: ALL})
    (row,) = run(impl, ops=[ATTEND], examples=3).ops
    nan = [f for f in row.failures if f.got is not None and f.got.startswith("nan")]
    finite = [f for f in row.failures if f.expected is not None and f not in nan]
    assert nan and finite and not any(f.hint for f in nan)
    assert sum("the error fits the bfloat16 bound" in f.hint for f in finite) * 2 > len(finite)


def test_a_far_off_bounded_kernel_gets_no_precision_hint():
    def far(**kw):
        out, lse = attend_emulated("float32", **kw)
        return np.asarray(out, np.float32) * np.float32(1.1), np.asarray(lse, np.float32)

    (row,) = run(Implementation("far", {ATTEND: far}, variants={ATTEND: ALL}), ops=[ATTEND], examples=2).ops
    assert row.verdict == "fail" and not any(f.hint for f in row.failures)


def test_the_ratio_histogram_counts_every_compared_output():
    def exact(**kw):
        out, lse = attend_emulated("float32", **kw)
        return np.asarray(out, np.float32), np.asarray(lse, np.float32)

    (row,) = run(Implementation("f32", {ATTEND: exact}, variants={ATTEND: ALL}), ops=[ATTEND], examples=5).ops
    hist = row.ratio_histogram
    assert hist["edges"] == list(RATIO_EDGES) and len(hist["counts"]) == len(RATIO_EDGES) - 1
    assert sum(hist["counts"]) == row.compared and row.verdict == "pass"
    assert sum(hist["counts"][RATIO_EDGES.index(1):]) == 0  # a passing kernel: every ratio below 1
    assert row.classes and all(c["failed"] == 0 for c in row.classes.values())


def test_count_ratio_bins_by_the_edges():
    row = OpReport("x", "bounded", "")
    for value in (0.0, 1 / 64, 0.9, 1.0, 3.9, 16.0, float("inf")):
        row.count_ratio(value)
    assert row.ratio_histogram["counts"] == [1, 1, 0, 0, 1, 1, 1, 0, 2]


def test_classes_count_cases_and_failures_per_flag(half_away):
    _, row = half_away
    assert row.classes["TiesToEven"]["failed"] >= 1
    assert all(0 <= c["failed"] <= c["cases"] for c in row.classes.values())
    assert sum(c["failed"] for c in row.classes.values()) >= len(row.failures) - 1


def test_the_table_summarises_uncovered_ops_and_counts_the_judged():
    report = run(HALF_AWAY, ops=["formats.float8_e4m3fn.*"], examples=2)
    uncovered = [r.op for r in report.ops if r.verdict == "not covered"]
    assert uncovered and report.judged == len(report.ops) - len(uncovered)
    short, full = report.table(), report.table(show_uncovered=True)
    assert not any(op in short for op in uncovered) and all(op in full for op in uncovered)
    assert f"{len(uncovered)} ops not covered by {HALF_AWAY.name} (--show-uncovered lists them)" in short


def test_judged_leaves_out_skipped_and_uncovered():
    rows = [OpReport("a", "exact", "", verdict=v) for v in ("pass", "fail", "skipped", "not covered", "xfail")]
    assert Report({"name": "x"}, rows, {}).judged == 3


def test_describe_without_a_comparison_shows_the_plain_failure():
    f = Failure("op", "the runner could not finish judging this op", (), {}, "raised ValueError: x")
    assert f.describe() == "op: the runner could not finish judging this op\n      raised ValueError: x"


def _validator():
    jsonschema = pytest.importorskip("jsonschema", reason="the test extra installs jsonschema")
    schema = json.loads((ROOT / "spec" / "report.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _strict(text: str):
    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_a_failing_report_validates_against_the_schema(half_away):
    report, _ = half_away
    upcast = run(Implementation("upcast", {ATTEND: _upcast}, variants={ATTEND: ALL}), ops=[ATTEND], examples=2)
    report.ops += upcast.ops
    doc = _strict(report.to_json())
    errors = sorted(_validator().iter_errors(doc), key=str)
    assert not errors, [e.message for e in errors[:5]]
    assert doc["schema"] == "llm-ref-report/1" and doc["ok"] is False
    assert {"python", "numpy", "ml_dtypes", "hypothesis"} <= set(doc["versions"])
    encode_row, attend_row = doc["ops"]
    assert encode_row["failures"][0]["expected_bits"] and encode_row["ratio_histogram"] is None
    assert attend_row["precision"] == "float32" and sum(attend_row["ratio_histogram"]["counts"]) > 0


def test_a_passing_report_validates_against_the_schema():
    from ref.conformance.adapters import ml_dtypes_casts

    impl = Implementation("ml_dtypes", dict(ml_dtypes_casts.OPS))
    report = run(impl, ops=["formats.float8_e4m3fn.decode", "formats.bfloat16.decode"], examples=5)
    doc = _strict(report.to_json())
    assert doc["ok"] is True and doc["judged"] == 2
    errors = sorted(_validator().iter_errors(doc), key=str)
    assert not errors, [e.message for e in errors[:5]]


def test_a_report_that_breaks_the_schema_is_refused(half_away):
    report, _ = half_away
    doc = _strict(report.to_json())
    doc["ops"][0]["failures"][0]["index"] = "0"
    assert list(_validator().iter_errors(doc))


def test_details_point_at_a_json_report_only_when_one_was_written(half_away):
    report, row = half_away
    assert len(row.failures) > 1
    plain, written = report.details(limit=1), report.details(limit=1, written="out/r.json")
    more = len(row.failures) - 1
    assert f"... {more} more failure{'s' * (more != 1)} (a JSON or HTML report lists every one)" in plain
    assert ".json" not in plain  # no file is named that was not written
    assert f"... {more} more failure{'s' * (more != 1)} in out/r.json" in written


def test_a_vector_failure_adds_the_flags_of_the_failing_element():
    """A vector's flags name what it targets (and are what entries match); the element
    that failed adds its own class, which may name the bug better: an MX quantizer that
    does not saturate fails a scale-rule vector on an element past the format's max."""
    from corpus.formats_impls import mx_composed

    impl = mx_composed(("no_saturation",), ("float8_e4m3fn",))
    (row,) = [r for r in run(impl, ops=["formats.mxfp8_e4m3.quantize"], examples=0).ops if r.verdict != "not covered"]
    assert row.verdict == "fail"
    vectors = [f for f in row.failures if f.vector is not None and f.expected is not None]
    assert vectors
    golden = {v.id: v for v in load_vectors("formats.mxfp8_e4m3.quantize")}
    for f in vectors:
        assert f.flags[:len(golden[f.vector].flags)] == tuple(golden[f.vector].flags)  # the vector's own first
    assert any(set(f.flags) - set(golden[f.vector].flags) for f in vectors)  # and the element's class added


def test_skipped_vectors_are_explained():
    """Why vectors were skipped: an undeclared variant value (named with its count), an
    undeclared input dtype, or an entry of the skips file."""
    oracle = discover()[ENCODE].oracle
    impl = Implementation("narrow", {ENCODE: oracle}, variants={ENCODE: {"overflow": ["saturate"]}},
                          dtypes={ENCODE: {"x": ["float32"]}})
    report = run(impl, ops=[ENCODE], examples=2, skips=parse_entries(f"{ENCODE}/3 not today\n"))
    (row,) = report.ops
    assert row.verdict == "pass" and row.vectors_skipped > 0
    (note,) = [n for n in row.notes if "vectors skipped" in n]
    assert note.startswith(f"{row.vectors_skipped} vectors skipped")
    assert "overflow=nonsaturating (" in note and "input dtypes not declared in DTYPES" in note
    assert "1 named by the skips" in note
    assert f"NOTE {ENCODE}: {note}" in report.details(verbose=True)  # the op passed: with -v
    assert note not in report.details()  # the table's vectors column counts them


@pytest.mark.parametrize("impl_name, op, key", [
    ("HALF_AWAY", ENCODE, "rounding=nearest_away"),
    ("SWAPPED_NIBBLES", "formats.float4_e2m1fn.pack", "order=high_first"),
])
def test_a_kernel_implementing_another_variant_is_told_which(impl_name, op, key):
    """A kernel that rounds ties away, or packs the high nibble first, fails as the
    default variant; its failures name the variant value whose oracle gives its output."""
    import corpus.formats_impls as impls

    (row,) = [r for r in run(getattr(impls, impl_name), ops=[op], examples=5).ops]
    compared = [f for f in row.failures if f.expected is not None]
    assert row.verdict == "fail" and compared
    hinted = [f for f in compared if f"the output is the oracle's under {key}" in f.hint]
    assert 2 * len(hinted) > len(compared)


def test_a_kernel_wrong_in_no_variant_s_way_gets_no_variant_hint():
    def one_code_up(x, **kw):
        if np.asarray(x).dtype.kind != "f":
            raise TypeError("x: expected floats")
        codes = encode(x, "float8_e4m3fn", **kw)
        return np.where((codes & 0x7F) < 0x7E, codes + 1, codes).astype(codes.dtype)

    (row,) = run(Implementation("up", {ENCODE: one_code_up}), ops=[ENCODE], examples=5).ops
    assert row.verdict == "fail" and not any("the output is the oracle's under" in f.hint for f in row.failures)


def test_an_id_element_is_shown_with_its_row():
    """A tree's parents or a block table: the element behind the failing output and the
    whole short row it sits in; floats and long rows show the element alone."""
    from ref.conformance.judges.evidence import input_texts

    texts = input_texts({"parents": np.int64([[-1, 0, 0, 1]]), "x": np.float32([[1, 2, 3, 4]])}, (0, 2), (1, 4))
    assert texts["parents"].startswith("parents[0, 2] = 0 (int64") and "in the row parents[0, :] = " in texts["parents"]
    assert "-1" in texts["parents"].split("in the row")[1] and "in the row" not in texts["x"]
    wide = input_texts({"t": np.zeros((2, 40), np.int64)}, (1, 3), (2, 40))["t"]
    assert "in the row" not in wide


def test_entries_hold_only_while_their_version_condition_does():
    """An xfail a later release fixes carries a condition, `[dist<version]`: the entry
    applies while the installed version satisfies every clause, and not at all for a
    distribution that is not installed (a strict xfail of a fixed bug would fail)."""
    import numpy

    major, minor = (int(x) for x in numpy.__version__.split(".")[:2])
    below, above = f"{major}.{minor}", f"{major}.{minor + 1}"
    text = "\n".join([f"a.b/1 [numpy<{above}] holds", f"a.b/2 [numpy<{below}] fixed since",
                      f"a.b/3 [numpy >= {below}, < {above}] a range that holds", f"a.b/4 [numpy>={major + 1}] not yet",
                      "a.b/5 [no-such-dist-llm-ref<1] never installed", "a.b/6 [numpy!=0.1] holds too",
                      f"a.b/7 [numpy=={numpy.__version__}] the installed one", "a.b/8 plain"])
    kept = {e.part: e for e in parse_entries(text)}
    assert sorted(kept) == ["1", "3", "6", "7", "8"]
    assert kept["1"].reason == "holds" and kept["1"].when == f"numpy<{above}" and kept["8"].when == ""
    everything = parse_entries(text, inactive=True)
    assert [e.part for e in everything] == [str(i) for i in range(1, 9)]
    assert version_holds(f"numpy=={numpy.__version__}.0") != version_holds(f"numpy=={below}.0.1")
    assert version_holds(f"numpy>={below}") and not version_holds(f"numpy>{major}.{minor}.999")
    for bad in ("a.b [numpy~=1] reason", "a.b [numpy] reason", "a.b [<1] reason", "a.b [numpy<1]"):
        with pytest.raises(ValueError, match=r"entries:1: (version condition|every entry needs a reason)"):
            parse_entries(bad)
