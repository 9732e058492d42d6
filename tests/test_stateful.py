"""The stateful kind (ref.testing.stateful, ref.conformance.judges.stateful), proven
on the block-pool stand-in: buggy twins fail at their first diverging step, from the
golden traces and from the property search each alone; correct twins that choose
other ids pass through renaming; the trace document round-trips and its check names
a tampered step; a candidate that misbehaves is a named failure."""

from __future__ import annotations

import dataclasses
import json
import random
import re

import pytest
from hypothesis import strategies as st

from ref.conformance.implementation import Implementation
from ref.conformance.judges.stateful import Lockstep, run_op
from ref.conformance.report import Entry, OpReport
from ref.conformance.runner import Settings
from ref.testing.renaming import Renaming
from ref.testing.stateful import (SCHEMA, StatefulOp, TraceSpec, build_traces, check_trace_document,
                                  load_traces, trace_document, traces_from_document)
from stand_ins.block_pool import BLOCK_POOL, BUGS, CORRECT, BlockPool

IMPL = Implementation("stand-in", {})
TRACES_ONLY = Settings(examples=0)
NO_TRACES = dataclasses.replace(BLOCK_POOL, vectors=lambda: [])


def judge(factory, *, op=BLOCK_POOL, settings=TRACES_ONLY, watch=None) -> OpReport:
    report = OpReport(op.name, op.kind.value, op.spec)
    run_op(op, factory, IMPL, settings, report, watch)
    return report


# bug -> (the trace that catches it first, the first diverging step)
FIRST_STEP = {"double_free": ("trace 6", "step 3: free(ids=[0])"),
              "off_by_one": ("trace 1", "step 3: allocate(n=2)"),
              "leak": ("trace 1", "step 6: num_free()"),
              "live_id": ("trace 5", "step 3: allocate(n=1)"),
              "stale_count": ("trace 1", "step 6: num_free()"),
              "partial_allocate": ("trace 9", "step 3: num_free()")}


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_each_bug_fails_a_golden_trace_at_its_first_diverging_step(bug):
    report = judge(BUGS[bug])
    assert report.verdict == "fail" and report.examples == 0
    first = report.failures[0]
    where, step = FIRST_STEP[bug]
    assert first.where == where
    assert f"first divergence at {step}" in first.detail
    assert "oracle state after it:" in first.detail and "candidate state after it:" in first.detail


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_each_bug_is_found_by_the_property_search_alone(bug):
    report = judge(BUGS[bug], op=NO_TRACES, settings=Settings(examples=30, shrink=False))
    assert report.verdict == "fail" and report.vectors_run == 0
    [failure] = report.failures
    assert failure.where == "property"
    steps = int(re.search(r"trace of (\d+) step", failure.comment).group(1))
    assert f"first divergence at step {steps}:" in failure.detail


def test_a_candidate_shows_its_own_snapshot_where_it_has_one():
    class Told(BUGS["leak"]):
        def snapshot(self):
            return {"mine": sorted(self._free)}

    class Broken(BUGS["leak"]):
        def snapshot(self):
            raise RuntimeError("no")

    assert 'candidate state after it: {"mine": []}' in judge(Told).failures[0].detail  # the leak: none free
    assert 'candidate state after it: {"live": [1, 3], "num_free": 0}' in judge(Broken).failures[0].detail


def test_a_refusal_that_changes_state_diverges_at_the_next_step():
    """The trace goes on after a refused step: the candidate refused too (as it
    should), but kept blocks, and the count after it shows the difference."""
    [failure] = judge(BUGS["partial_allocate"]).failures
    assert "2. allocate(n=2) -> refused (ValueError)" in failure.detail
    assert "expected: 1" in failure.detail and "actual:   0" in failure.detail


@pytest.mark.parametrize("bug, most", [("double_free", 2), ("off_by_one", 2)])
def test_a_failing_search_is_shrunk_to_a_minimal_trace(bug, most):
    [failure] = judge(BUGS[bug], op=NO_TRACES, settings=Settings(examples=30)).failures
    steps = int(re.search(r"minimal failing trace of (\d+) step", failure.comment).group(1))
    assert steps <= most, failure.describe()
    assert failure.detail.count("\n          ") == steps - 1  # the steps before the divergence, one a line


class RandomIds(BlockPool):
    """Correct: ids drawn at random from a large space."""

    def _ids(self):
        return random.Random(self.num_blocks).sample(range(10**6), self.num_blocks)


@pytest.mark.parametrize("twin", [*CORRECT.values(), RandomIds], ids=[*CORRECT, "random"])
def test_correct_twins_pass_through_renaming(twin):
    report = judge(twin, settings=Settings(examples=25))
    assert report.verdict == "pass", [f.describe() for f in report.failures]
    assert report.vectors_passed == report.vectors_run == len(BLOCK_POOL.vectors())
    assert report.examples >= 25 and report.compared > 100


def test_a_double_free_reaches_the_candidate_as_its_own_double_free():
    """After a release, the oracle's id translates to the candidate's old id, so a
    candidate that accepts a double free fails even with ids unlike the oracle's."""
    class OffsetDoubleFree(CORRECT["offset"]):
        def free(self, ids):
            self._live.difference_update(ids)
            self._free.extend(ids)

    report = judge(OffsetDoubleFree)
    assert report.failures[0].where == "trace 6"
    assert "free(ids=[0]) (called on the candidate as free(ids=[1000]))" in report.failures[0].detail


# --- renaming -------------------------------------------------------------------------

def test_renaming_binds_new_ids_and_keeps_them_until_released():
    r = Renaming(BLOCK_POOL.methods, BLOCK_POOL.identifiers, BLOCK_POOL.releases)
    assert r.compare("allocate", [0, 1], [7, 3]) is None
    assert r.translate("free", {"ids": [1, 0]}) == {"ids": [3, 7]}
    assert "oracle id 0 stands for the candidate's 7, got 8" in r.compare("allocate", [0], [8])
    r.release("free", {"ids": [0]}, None)
    assert r.compare("allocate", [0], [9]) is None  # a released oracle id binds afresh
    assert r.compare("num_free", 2, 2) is None and "expected 2, got 3" in r.compare("num_free", 2, 3)
    assert r.compare("allocate", [None], [None]) is None  # null is no id: it matches only null
    assert r.compare("allocate", [None], [5]) == "observation[0]: expected null, got 5"
    assert r.compare("allocate", [3], [None]) == "observation[0]: expected 3, got null"


def test_renaming_is_a_bijection():
    r = Renaming(BLOCK_POOL.methods, BLOCK_POOL.identifiers, BLOCK_POOL.releases)
    assert "the candidate's id 5 already stands for oracle id 0, here it would stand for 1 too" in \
        r.compare("allocate", [0, 1], [5, 5])
    assert r.forward == {}  # a failed observation binds nothing
    assert r.compare("allocate", [0], [5]) is None
    assert "already stands for oracle id 0" in r.compare("allocate", [1], [5])


def test_arguments_translate_released_and_unknown_ids():
    r = Renaming(BLOCK_POOL.methods, BLOCK_POOL.identifiers, BLOCK_POOL.releases)
    r.compare("allocate", [0, 1], [1, 0])
    r.release("free", {"ids": [0]}, None)
    assert r.translate("free", {"ids": [0]}) == {"ids": [1]}  # its old id: a double free stays one
    r.compare("allocate", [2], [1])  # the candidate reuses 1 for another block
    assert r.translate("free", {"ids": [0]}) == {"ids": [2]}  # 0 and 1 stand for live blocks: a fresh id
    assert r.translate("free", {"ids": [7]}) == {"ids": [7]}  # never handed out by either side
    assert r.translate("num_free", {}) == {}


class Handles:
    """A second stand-in whose observations repeat ids: put(key) -> a new handle,
    handle(key) -> the handle of a key put before."""

    def __init__(self):
        self._handles: dict[str, int] = {}

    def put(self, key):
        if key in self._handles:
            raise ValueError(f"key: {key!r} is already put")
        self._handles[key] = len(self._handles)
        return self._handles[key]

    def handle(self, key):
        if key not in self._handles:
            raise ValueError(f"key: {key!r} was never put")
        return self._handles[key]


HANDLES = StatefulOp(
    name="stand_in.handles", oracle=Handles, summary="handles", spec="spec/conformance.md#stateful",
    methods=("put", "handle"), identifiers=("put.observation", "handle.observation"),
    vectors=lambda: [TraceSpec("a handle is the same each time it is asked for", (),
                               (("put", {"key": "a"}), ("put", {"key": "b"}), ("handle", {"key": "a"}),
                                ("handle", {"key": "b"})))],
    examples=lambda supported: st.just({}),
    steps=lambda model: st.tuples(st.sampled_from(["put", "handle"]),
                                  st.fixed_dictionaries({"key": st.sampled_from("abc")})))


def test_mapping_one_oracle_id_to_two_candidate_ids_fails():
    class Shifted(Handles):  # handles 100, 101, ... : a renaming, correct
        def put(self, key):
            return super().put(key) + 100

        def handle(self, key):
            return super().handle(key) + 100

    class FreshEachTime(Handles):  # handle() makes up a new handle: oracle id 0 would be 0 and 2
        def handle(self, key):
            super().handle(key)
            return len(self._handles)

    assert judge(Shifted, op=HANDLES, settings=Settings(examples=15)).verdict == "pass"
    report = judge(FreshEachTime, op=HANDLES)
    assert "first divergence at step 3: handle(key=\"a\")" in report.failures[0].detail
    assert "oracle id 0 stands for the candidate's 0, got 2" in report.failures[0].detail
    assert judge(FreshEachTime, op=HANDLES, settings=Settings(examples=15)).failures[-1].where == "property"


# --- the trace document ---------------------------------------------------------------

def test_the_document_round_trips_and_checks():
    doc = json.loads(json.dumps(trace_document(BLOCK_POOL)))
    assert doc["schema"] == SCHEMA and doc["kind"] == "stateful"
    assert doc["identifiers"] == ["allocate.observation[*]", "free.args.ids[*]"]
    assert set(doc["traces"][0]) == {"id", "comment", "flags", "result", "params", "steps"}
    assert doc["traces"][0]["steps"][0] == {"method": "allocate", "args": {"n": 2}, "refused": False,
                                            "observation": [0, 1]}
    assert [s["refused"] for s in doc["traces"][8]["steps"]] == [False, True, False, False, False]
    assert doc["traces"][8]["steps"][1]["observation"] is None
    assert traces_from_document(doc) == build_traces(BLOCK_POOL)
    assert check_trace_document(BLOCK_POOL, doc) == []


def test_the_check_names_a_tampered_observation_and_result():
    doc = json.loads(json.dumps(trace_document(BLOCK_POOL)))
    doc["traces"][3]["steps"][2]["observation"] = 1
    doc["traces"][5]["result"] = "valid"
    doc["traces"][8]["steps"][1]["refused"] = False
    del doc["traces"][0]["steps"][1]["refused"]
    problems = check_trace_document(BLOCK_POOL, doc)
    assert problems == [
        "stand_in.block_pool: trace 1 (allocate and free everything, counting): step 2 (num_free) has no boolean "
        "'refused'",
        "stand_in.block_pool: trace 4 (freed blocks are handed out again): step 3 (num_free) stores observation 1, "
        "the oracle observes 2",
        "stand_in.block_pool: trace 6 (a double free is refused): the oracle refuses step 3 of a trace stored as "
        "'valid'",
        "stand_in.block_pool: trace 9 (a refused allocate takes nothing: the trace goes on after it): the oracle "
        "refuses step 2; the trace stores nothing as refused"]
    doc = trace_document(BLOCK_POOL)
    doc["traces"][0]["comment"] = "edited"
    assert check_trace_document(BLOCK_POOL, doc) == [
        "stand_in.block_pool: trace 1 (allocate and free everything, counting) differs from the generator's"]
    doc = {**trace_document(BLOCK_POOL), "schema": "llm-ref-golden/2/exact", "identifiers": []}
    assert check_trace_document(BLOCK_POOL, doc) == [
        "stand_in.block_pool: field 'schema' differs from the catalog's",
        "stand_in.block_pool: field 'identifiers' differs from the catalog's"]


def _folder(tmp_path, doc):
    import hashlib

    data = json.dumps(doc).encode()
    (tmp_path / "stand_in").mkdir()
    (tmp_path / "stand_in" / "block_pool.json").write_bytes(data)
    manifest = {"ops": {BLOCK_POOL.name: {"json": "stand_in/block_pool.json"}},
                "files": {"stand_in/block_pool.json": hashlib.sha256(data).hexdigest()}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    return tmp_path / "stand_in" / "block_pool.json"


def test_the_judge_replays_the_stored_traces(tmp_path):
    doc = trace_document(BLOCK_POOL)
    doc["traces"] = [doc["traces"][5]]  # only the double free
    path = _folder(tmp_path, doc)
    assert [t.id for t in load_traces(BLOCK_POOL.name, tmp_path)] == [6]
    report = judge(BUGS["double_free"], settings=Settings(examples=0, golden=tmp_path))
    assert report.vectors_run == 1 and report.failures[0].where == "trace 6"
    assert load_traces("stand_in.other", tmp_path) is None
    path.write_text(path.read_text().replace('"ids": [0]', '"ids": [1]'))
    with pytest.raises(ValueError, match="does not match its sha256"):
        load_traces(BLOCK_POOL.name, tmp_path)


# --- declarations -----------------------------------------------------------------

@pytest.mark.parametrize("change, message", [
    ({"methods": ()}, "methods must be a non-empty tuple of public method names"),
    ({"methods": ("allocate", "_reset")}, "public method names"),
    ({"methods": ("free", "free")}, "a method is listed twice"),
    ({"identifiers": ("reserve.observation[*]",)}, "names method 'reserve', not one of"),
    ({"identifiers": ("allocate[*]",)}, "is not a path like"),
    ({"identifiers": "allocate.observation[*]"}, "a tuple of paths"),
    ({"releases": ("allocate.observation[*]", "free.args.n")}, "not among the identifiers"),
    ({"outputs": ("ids",)}, "observations, not outputs"),
    ({"max_steps": 0}, "max_steps must be a positive int"),
    ({"steps": None}, "steps must be callable"),
])
def test_bad_declarations_are_named(change, message):
    with pytest.raises((ValueError, TypeError), match=re.escape(message)):
        dataclasses.replace(BLOCK_POOL, **change)


@pytest.mark.parametrize("spec, message", [
    (TraceSpec("x", (), (("allocate", {"n": 9}),), params={"num_blocks": 2}), "it refuses step 1"),
    (TraceSpec("x", (), (("allocate", {"n": 9}), ("num_free", {})), params={"num_blocks": 2}, result="invalid",
               refused=(2,)), "the oracle refuses step 2; it refuses step 1"),
    (TraceSpec("x", (), (("allocate", {"n": 9}),), params={"num_blocks": 2}, refused=(1,)),
     "make the trace's result 'invalid', not 'valid'"),
    (TraceSpec("x", (), (("allocate", {"n": 9}),), params={"num_blocks": 2}, result="invalid", refused=(2,)),
     "refused must list step numbers 1..1 in increasing order"),
    (TraceSpec("x", (), (("allocate", {"n": 9}),), params={"num_blocks": 2}, result="invalid", refused=()),
     "refused must list step numbers"),
    (TraceSpec("x", (), (("allocate", {"n": 1}),), params={"num_blocks": 2}, result="invalid"),
     "it refuses nothing"),
    (TraceSpec("x", (), (("allocate", {"n": 9}), ("num_free", {})), params={"num_blocks": 2}, result="invalid"),
     "it refuses step 1"),
    (TraceSpec("x", (), (("reset", {}),), params={"num_blocks": 2}), "step 1 calls 'reset', not one of"),
    (TraceSpec("x", (), (), params={"num_blocks": 2}, result="acceptable"), "result must be one of"),
    (TraceSpec("x", (), (("free", {"ids": {1, 2}}),), params={"num_blocks": 2}), "is not JSON"),
])
def test_bad_traces_are_named(spec, message):
    op = dataclasses.replace(BLOCK_POOL, vectors=lambda: [spec])
    with pytest.raises((ValueError, TypeError), match=re.escape(message)):
        build_traces(op)


def test_an_oracle_whose_refusal_changes_its_state_is_a_defect_named_at_generation():
    op = dataclasses.replace(BLOCK_POOL, oracle=BUGS["partial_allocate"])
    with pytest.raises(ValueError, match=re.escape("trace 3 (asking for more than is free is refused): the oracle "
                                                   "refuses step 2 (allocate) but its state changed")):
        build_traces(op)


# --- misbehaving candidates ---------------------------------------------------------------

class Raises(BlockPool):
    def num_free(self):
        raise RuntimeError("counter unavailable")


class Exits(BlockPool):
    def allocate(self, n):
        raise SystemExit(3)


class Garbage(BlockPool):
    def allocate(self, n):
        ids = super().allocate(n)
        return (i for i in ids)


def _refuses_params(num_blocks):
    raise RuntimeError("cannot build")


class Declines(BlockPool):
    def free(self, ids):
        raise NotImplementedError("free is not provided")


@pytest.mark.parametrize("factory, detail", [
    (Raises, "actual:   raised RuntimeError: counter unavailable"),
    (Exits, "the implementation raised SystemExit: 3 (it must raise an Exception, not end the process)"),
    (Garbage, "actual:   returned <generator object"),
    (_refuses_params, "first divergence at construction"),
    (lambda num_blocks: None, "has no attribute 'allocate'"),
])
def test_a_misbehaving_candidate_is_a_named_failure(factory, detail):
    report = judge(factory, settings=Settings(examples=10))
    assert report.verdict == "fail"
    assert any(detail in f.detail for f in report.failures), [f.describe() for f in report.failures]
    assert {f.where for f in report.failures} >= {"property"}


def test_a_declined_trace_is_counted_not_failed():
    report = judge(Declines, settings=Settings(examples=10))
    assert report.verdict == "pass" and report.unsupported > 0 and report.vectors_skipped > 0
    everything = judge(lambda num_blocks: (_ for _ in ()).throw(NotImplementedError()), settings=Settings(examples=5))
    assert everything.verdict == "skipped"


def test_skips_and_xfails_entries_are_honoured():
    flagged = Entry("stand_in.*", "DoubleFree", "double frees are the caller's problem here")
    report = judge(BUGS["double_free"], settings=Settings(examples=0, xfails=(flagged,)))
    assert report.verdict == "xfail" and [f.where for f in report.xfailed] == ["trace 6", "trace 7"]
    xfail_6 = Entry("stand_in.*", "6", "listed by id")
    strict = judge(BlockPool, settings=Settings(examples=0, xfails=(xfail_6,)))
    assert strict.verdict == "fail" and strict.failures[0].comment == "listed as xfail but passed (strict)"
    by_flag = judge(BUGS["double_free"], settings=Settings(
        examples=20, skips=(Entry("stand_in.block_pool", "DoubleFree", "x"), Entry("stand_in.block_pool",
                                                                                 "properties", "x"))))
    assert by_flag.verdict == "pass" and by_flag.vectors_skipped == 2 and by_flag.examples == 0
    whole = judge(BUGS["leak"], settings=Settings(skips=(Entry("stand_in.*", "*", "not today"),)))
    assert whole.verdict == "skipped" and whole.notes == ["not today"]


def test_the_watch_hears_every_candidate_call():
    heard = []
    judge(BlockPool, watch=lambda state, where, flags: heard.append((state, where)))
    assert heard[0] == ("call", "trace 1") and heard[1] == ("back", "trace 1")
    assert len(heard) == 2 * sum(1 + len(t.steps) for t in build_traces(BLOCK_POOL))


def test_lockstep_reports_the_steps_before_the_divergence():
    run = Lockstep(BLOCK_POOL, BUGS["leak"])
    run.start({"num_blocks": 2})
    run.step("allocate", {"n": 2})
    run.step("free", {"ids": [1]})
    with pytest.raises(Exception) as err:
        run.step("num_free", {})
    text = str(err.value)
    assert "first divergence at step 3: num_free()" in text
    assert "1. allocate(n=2) -> [0, 1]" in text and "2. free(ids=[1]) -> null" in text
    assert 'oracle state after it:    {"live": [0], "num_free": 1}' in text


def test_the_search_is_the_same_on_every_run():
    runs = [judge(BUGS["leak"], op=NO_TRACES, settings=Settings(examples=20, shrink=False)) for _ in range(2)]
    assert runs[0].failures[0].detail == runs[1].failures[0].detail and runs[0].examples == runs[1].examples


def test_observations_are_json():
    import numpy as np

    from ref.testing.stateful import as_json

    assert as_json((np.int64(3), np.array([1.5]), {"a": None, "b": True})) == [3, [1.5], {"a": None, "b": True}]
    for bad, message in [(float("nan"), "not a JSON number"), ({1: 2}, "keys must be strings"),
                         ({1, 2}, "set {1, 2} is not JSON")]:
        with pytest.raises(TypeError, match=re.escape(message)):
            as_json(bad)
