"""The HTML report, rendered from a real run's JSON report: a corpus bug (FP8 ties
rounded away from zero, RoPE ignoring its positions) beside correct kernels.

The report fields the failures work adds (ratio_histogram, classes, precision,
structured failures, versions) are built here from the same run the way the brief
defines them: a second pass records every compared output's error over its bound
and every case's flags, and each failure's index, values and bits are read from its
detail. So the page is checked on a document that has them and on one that does not.
"""

from __future__ import annotations

import json
import re
import sys
from fnmatch import fnmatchcase
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from ref.conformance import html_report
from ref.conformance.catalog import discover, flags
from ref.conformance.implementation import Implementation
from ref.conformance.judges import Settings
from ref.conformance.judges.arrays import run_checks
from ref.conformance.judges.bounded import BoundedJudge
from ref.conformance.judges.exact import ExactJudge
from ref.conformance.report import OpReport
from ref.conformance.runner import parse_entries, run
from ref.testing.bounded import ratio
from ref.testing.vector_files import load_vectors

sys.path.insert(0, str(Path(__file__).parent))
from corpus import attention_impls  # noqa: E402
from corpus.formats_impls import CORRECT, HALF_AWAY  # noqa: E402

ENCODE, DECODE, ROPE, MERGE = ("formats.float8_e4m3fn.encode", "formats.float8_e4m3fn.decode", "attention.rope",
                               "attention.merge_states")
EDGES = [0, 1 / 64, 1 / 16, 1 / 4, 1 / 2, 1, 2, 4, 16, "inf"]
SELECTED = ["formats.float8_e4m3fn.*", "attention.*"]
HOSTILE = "<script>alert('x')</script> & \"quotes\""
XFAILS = f"{ENCODE}/Float16Input  float16 inputs are widened first {HOSTILE}"


def _implementation() -> Implementation:
    buggy_rope = attention_impls.naive_impl("bfloat16", {"positions ignored"})
    good = attention_impls.naive_impl("float32")
    ops = {ENCODE: HALF_AWAY.ops[ENCODE], DECODE: CORRECT.ops[DECODE], ROPE: buggy_rope.ops[ROPE],
           MERGE: good.ops[MERGE]}
    declared = {**HALF_AWAY.variants, **CORRECT.variants, **good.variants}
    return Implementation(f"mixed kernels {HOSTILE}", ops, variants={k: v for k, v in declared.items() if k in ops})


class _Recording:
    """A judge that also records, per compared output, its flags, whether it failed and
    (bounded) its error as a fraction of the bound."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: list[tuple[tuple[str, ...], bool, float]] = []

    def judge_output(self, case, actual, expected, alternatives):
        cmp, note = super().judge_output(case, actual, expected, alternatives)
        self.seen.append((tuple(self.at[1]), not cmp.ok, ratio(cmp)))
        return cmp, note


class _RecordingExact(_Recording, ExactJudge):
    pass


class _RecordingBounded(_Recording, BoundedJudge):
    pass


def _histogram(shares) -> dict:
    bounds = [float(e) for e in EDGES]
    counts = [0] * (len(EDGES) - 1)
    for s in shares:
        counts[next(i for i in range(len(counts)) if bounds[i] <= s < bounds[i + 1] or i == len(counts) - 1)] += 1
    return {"edges": EDGES, "counts": counts}


def _classes(seen) -> dict:
    classes: dict[str, dict[str, int]] = {}
    for case_flags, failed, _ in seen:
        for name in case_flags or ("unflagged",):
            row = classes.setdefault(name, {"cases": 0, "failed": 0})
            row["cases"] += 1
            row["failed"] += failed
    return classes


DETAIL = re.compile(r"first at index \(([\d, ]*)\): expected (.+?), got (.+?)(?: \(bits (\S+) vs (\S+)\)| \(|$)")


def _structured(failure: dict, op, notes) -> dict:
    """A failure with the fields the brief defines, read from its detail and vector
    (as it comes when the report has them already)."""
    if "index" in failure:
        return failure
    found = DETAIL.search(failure["detail"])
    index = [int(i) for i in found.group(1).replace(" ", "").split(",") if i] if found else None
    vector = int(failure["where"].split()[1]) if failure["where"].startswith("vector ") else None
    inputs = {}
    if vector is not None and index is not None:
        (v,) = [v for v in load_vectors(op.name) if v.id == vector]
        inputs = {name: str(arr[tuple(index)]) for name, arr in v.inputs.items() if arr.ndim == len(index)}
    return {**failure, "vector": vector, "index": index, "inputs": inputs,
            "expected": found.group(2) if found else None, "got": found.group(3) if found else None,
            "expected_bits": found.group(4) if found else None, "got_bits": found.group(5) if found else None,
            "flag_text": {f: notes[f].bug for f in failure["flags"] if f in notes}, "spec": op.spec}


OLDER_FAILURE = ("where", "comment", "flags", "params", "detail")  # a failure's fields before the schema
NEWER_OP = ("precision", "ratio_histogram", "classes")


def _older(doc: dict) -> dict:
    """`doc` without the fields the report schema added (a report of an older version)."""
    doc = {k: v for k, v in doc.items() if k not in ("schema", "versions", "judged", "xfails")}
    doc["ops"] = [{**{k: v for k, v in row.items() if k not in NEWER_OP},
                   "failures": [{k: f[k] for k in OLDER_FAILURE} for f in row["failures"]],
                   "xfailed": [{k: f[k] for k in OLDER_FAILURE} for f in row["xfailed"]]} for row in doc["ops"]]
    return doc


@pytest.fixture(scope="module")
def run_docs():
    """(the report as an older version wrote it, the report with the schema's fields:
    those the runner does not write yet built here as the schema defines them)."""
    impl, catalog, notes = _implementation(), discover(), flags()
    xfails = parse_entries(XFAILS)
    rich = json.loads(run(impl, ops=SELECTED, examples=5, xfails=xfails).to_json())
    rich.setdefault("schema", "llm-ref-report/1")
    rich.setdefault("versions", {"python": sys.version.split()[0], "numpy": np.__version__})
    rich.setdefault("xfails", [{"op": e.op, "part": e.part, "reason": e.reason} for e in xfails])
    settings = Settings(5, True, (), tuple(xfails), None, False)
    for row in rich["ops"]:
        if row["verdict"] == "not covered":
            continue
        op = catalog[row["op"]]
        if "classes" not in row:
            judge = (_RecordingBounded if row["kind"] == "bounded" else _RecordingExact)(
                op, impl.ops[op.name], impl, OpReport(op.name, row["kind"], op.spec))
            run_checks(judge, settings)
            row["classes"] = _classes(judge.seen)
            row["ratio_histogram"] = _histogram([s for _, _, s in judge.seen]) if row["kind"] == "bounded" else None
            row["precision"] = {ROPE: "bfloat16", MERGE: "float32"}.get(op.name, "")
        row["failures"] = [_structured(f, op, notes) for f in row["failures"]]
        row["xfailed"] = [_structured(f, op, notes) for f in row["xfailed"]]
    return _older(rich), rich


class _Tags(HTMLParser):
    """Every tag opened is closed, in order; collects the bars and the text."""

    VOID = {"meta", "br", "hr", "img", "input", "link"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.text: list[str] = []
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def _parse(page: str) -> _Tags:
    parser = _Tags()
    parser.feed(page)
    parser.close()
    assert not parser.problems and not parser.stack, (parser.problems, parser.stack)
    return parser


@pytest.mark.parametrize("which", ["plain", "rich"])
def test_the_page_is_well_formed_and_names_every_op_and_failure(run_docs, which):
    doc = run_docs[0] if which == "plain" else run_docs[1]
    page = html_report.render(doc)
    assert page.startswith("<!DOCTYPE html>")
    parsed = _parse(page)
    text = "".join(parsed.text)
    verdicts = {row["op"]: row["verdict"] for row in doc["ops"]}
    assert verdicts[ENCODE] == "fail" and verdicts[ROPE] == "fail" and verdicts[MERGE] == "pass"
    for row in doc["ops"]:
        assert row["op"] in text
        for failure in row["failures"] + row["xfailed"]:
            assert failure["comment"] in text and failure["where"] in text
    sections = [a["id"] for tag, a in parsed.tags if tag == "section"]
    assert set(sections) == {f"op-{op}" for op, v in verdicts.items() if v != "not covered"}
    encode = next(row for row in doc["ops"] if row["op"] == ENCODE)
    assert f"{ENCODE}exactfail{len(encode['failures'])} (+{len(encode['xfailed'])} xfail)" in text
    order = [verdicts[s.removeprefix("op-")] for s in sections]
    assert order == sorted(order, key=lambda v: v != "fail")  # failing ops first
    # the ops not covered are one line, not a row each
    uncovered = [op for op, v in verdicts.items() if v == "not covered"]
    assert len(uncovered) == sum(any(fnmatchcase(op, p) for p in SELECTED) for op in discover()) - 4 > 0
    assert f"{len(uncovered)} ops not covered" in text
    spaced = " ".join(parsed.text)
    assert all(len(re.findall(re.escape(op) + r"(?![\w.])", spaced)) == 1 for op in uncovered)
    # self-contained: no script, nothing fetched
    assert "<script" not in page and not re.search(r"""(src|href)=["']?(https?:)?//""", page)


def test_a_failure_shows_its_input_values_bits_and_flag_texts(run_docs):
    page = html_report.render(run_docs[1])
    text = "".join(_parse(page).text)
    notes = flags()
    rows = {row["op"]: row for row in run_docs[1]["ops"]}
    ties = next(f for f in rows[ENCODE]["failures"] if f["where"] == "vector 5")
    assert ties["index"] == [0] and ties["expected_bits"] and ties["inputs"]["x"]
    for field in ("expected", "got", "expected_bits", "got_bits"):
        assert ties[field] in text
    assert f"input x{ties['inputs']['x']}" in text.replace("\n", "")
    assert "first index(0,)" in text and "first index(10, 5)" in text
    for row in rows.values():
        for failure in row["failures"] + row["xfailed"]:
            for flag in failure["flags"]:
                assert notes[flag].bug in text, flag
    assert "spec/formats.md#encode" in text and "spec/attention.md#rope" in text
    assert "judged at bfloat16" in text


def test_flag_texts_come_from_flag_notes_when_the_report_has_none(run_docs):
    notes = {name: f.bug for name, f in flags().items()}
    text = "".join(_parse(html_report.render(run_docs[0], flag_notes=notes)).text)
    assert notes["TiesToEven"] in text and notes["RopePositions"] in text
    assert notes["TiesToEven"] not in html_report.render(run_docs[0])


def test_the_bars_follow_the_histogram_counts(run_docs):
    rows = {row["op"]: row for row in run_docs[1]["ops"]}
    page = html_report.render(run_docs[1])
    parsed = _parse(page)
    bars = [a for tag, a in parsed.tags if tag == "rect" and a.get("class") == "bar"]
    expected = rows[ROPE]["ratio_histogram"]["counts"] + rows[MERGE]["ratio_histogram"]["counts"]
    assert sum(rows[ROPE]["ratio_histogram"]["counts"][5:]) > 0 and sum(expected) > len(expected)
    # in page order: rope (failing ops first), then merge_states; a bar per bin
    assert [int(b["data-count"]) for b in bars] == expected
    for chart in (bars[:9], bars[9:]):
        most = max(int(b["data-count"]) for b in chart)
        tallest = max(float(b["height"]) for b in chart)
        for b in chart:
            count, height = int(b["data-count"]), float(b["height"])
            assert (height == 0) == (count == 0)
            assert height == pytest.approx(max(tallest * count / most, 1.0 if count else 0.0), abs=0.01)
        assert all(b["fill"] == "#cf222e" for b in chart[5:]) and all(b["fill"] != "#cf222e" for b in chart[:5])
    bounds = [a for tag, a in parsed.tags if tag == "line" and a.get("class") == "bound"]
    assert len(bounds) == 2  # at edge 1, between the fifth and sixth bars
    assert float(bars[4]["x"]) + float(bars[4]["width"]) < float(bounds[0]["x1"]) < float(bars[5]["x"])


def test_the_class_map_shows_cases_and_failures_per_class(run_docs):
    rows = {row["op"]: row for row in run_docs[1]["ops"]}
    classes = rows[ENCODE]["classes"]
    assert classes["TiesToEven"]["failed"] > 0 and len(classes) > 3
    parsed = _parse(html_report.render(run_docs[1]))
    shown = {(a["data-failed"], a["data-cases"]): float(a["width"]) for tag, a in parsed.tags
             if tag == "rect" and a.get("class") == "failed"}
    for row in classes.values():
        width = shown[(str(row["failed"]), str(row["cases"]))]
        assert width == pytest.approx(160 * row["failed"] / row["cases"], abs=0.01)


def test_user_text_is_escaped_and_xfails_show_their_reason(run_docs):
    for doc in run_docs:
        page = html_report.render(doc)
        assert "<script" not in page and "&lt;script&gt;" in page
    text = "".join(_parse(html_report.render(run_docs[1])).text)
    assert f"float16 inputs are widened first {HOSTILE}" in text  # the reason, from the report's xfails list
    rows = {row["op"]: row for row in run_docs[1]["ops"]}
    assert {f["where"] for f in rows[ENCODE]["xfailed"]} == {"vector 30", "vector 31"}
    own = {**run_docs[1], "xfails": [],
           "ops": [{**r, "xfailed": [{**f, "reason": "its own reason"} for f in r["xfailed"]]} for r in rows.values()]}
    assert "its own reason" in html_report.render(own)


def test_an_older_or_partial_document_renders(tmp_path):
    assert "0 ops" in html_report.render({})
    partial = {"implementation": {"name": "k"}, "complete": False, "interrupted": "KeyboardInterrupt while x ran",
               "ops": [{"op": "a.b", "verdict": "fail", "failures": [{"where": "vector 1"}]},
                       {"op": "a.c", "verdict": "pass", "kind": "bounded",
                        "ratio_histogram": {"edges": [0, 1], "counts": [1, 2]}},
                       {"op": "a.d", "verdict": "not covered"},
                       {"op": "a.e", "verdict": "skipped", "notes": ["no <kernel> for this"]},
                       {"op": "a.f", "verdict": "pass", "ratio_histogram": {"edges": [0, 1, 2], "counts": [1, "x"]},
                        "acceptable": ["vector 2: matches variant nan=zero"] * 3
                        + ["vector 3: matches variant nan=max"]}]}
    text = "".join(_parse(html_report.render(partial)).text)
    assert "INCOMPLETE" in text and "KeyboardInterrupt while x ran" in text
    assert "ratio_histogram unreadable: 2 edges for 2 counts" in text and "1 ops not covered by k" in text
    assert "a.eno <kernel> for this" in text  # a skipped op's reason under its name
    assert "ratio_histogram unreadable: 3 edges for 2 counts" in text
    assert "5 ops: fail\xa01 pass\xa02 not covered\xa01 skipped\xa01" in text  # counted when there is no summary
    assert text.count("matches variant nan=zero") == 1 and "matches variant nan=max" in text
    with pytest.raises(TypeError, match="doc: expected the JSON report as a dict"):
        html_report.render("[]")


def test_write_and_load_round_trip_through_a_file(run_docs, tmp_path):
    report = tmp_path / "r.json"
    report.write_text(json.dumps(run_docs[1]))
    out = html_report.write(html_report.load(report), tmp_path / "r.html")
    assert out.read_text(encoding="utf-8") == html_report.render(run_docs[1])
    report.write_text('{"ops": [], "worst": NaN}')
    with pytest.raises(ValueError, match="not a strict JSON report: bare NaN"):
        html_report.load(report)
    for other in ("{}", "[1, 2]", '{"ops": [{"op": "x"}]}', '{"schema": "llm-ref-golden/2/exact", "ops": []}'):
        report.write_text(other)
        with pytest.raises(ValueError, match="not an llm-ref report"):
            html_report.load(report)


def test_the_html_command_renders_a_report_file_with_the_catalog_flag_texts(run_docs, tmp_path, capsys):
    from ref.cli import main

    report = tmp_path / "run.json"
    report.write_text(json.dumps(run_docs[1]))
    assert main(["html", str(report)]) == 0
    page = (tmp_path / "run.html").read_text(encoding="utf-8")
    assert flags()["TiesToEven"].bug in "".join(_parse(page).text)
    assert main(["html", str(report), "-o", str(tmp_path / "elsewhere.html")]) == 0
    assert (tmp_path / "elsewhere.html").read_text(encoding="utf-8") == page
    assert "HTML report written to" in capsys.readouterr().out
    assert main(["html", str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err


def test_each_expected_failure_gets_the_reason_of_the_entry_naming_its_check():
    entries = parse_entries("a.*/3 on vector three\na.b/properties on random examples\n"
                            "a.b/exhaustive on the sweep\na.b/Nan on NaN inputs")
    doc = {"xfails": [{"op": e.op, "part": e.part, "reason": e.reason} for e in entries],
           "ops": [{"op": "a.b", "verdict": "xfail", "xfailed": [
               {"where": "property", "comment": "c1"}, {"where": "vector 3", "comment": "c2"},
               {"where": "exhaustive case 2", "comment": "c3"},
               {"where": "vector 4", "comment": "c4", "flags": ["Nan"]},
               {"where": "vector 5", "comment": "c5"}]}]}
    page = html_report.render(doc)
    blocks = re.findall(r'<div class="failure xfail">(.*?)</div>', page, re.S)
    reasons = [re.search(r"Reason listed:</b> ([^<]*)", b) for b in blocks]
    assert [r.group(1) if r else None for r in reasons] == [
        "on random examples", "on vector three", "on the sweep", "on NaN inputs", None]


def test_a_bounded_failure_shows_its_precision_and_the_precision_hint():
    hint = 'the error fits the bfloat16 bound (0.4 of it): declare PRECISION = {"attention.attend": "bfloat16"}'
    doc = {"judged": 1, "ops": [{"op": "attention.attend", "kind": "bounded", "verdict": "fail", "precision": "float32",
                                 "failures": [{"where": "vector 1", "comment": "c", "flags": [], "params": {},
                                               "detail": "1377x", "precision": "float32", "hint": hint,
                                               "fits": {"bfloat16": 0.4}}]}]}
    text = "".join(_parse(html_report.render(doc)).text)
    assert "1 ops: fail\xa01; 1 judged" in text
    assert f"Hint: {hint}" in text and "judged atfloat32" in text and "the bfloat16 bound (0.4 of it)" in text
