"""Typed variants end to end: an axis of strings (an enum), one of bools and one of
ints travel as their JSON values through the golden files (params, latitude
alternatives keyed by `Variant.key`), the implementation's declarations (checked with
their JSON type) and the runner's calls. A small op of its own keeps these tests
independent of any area's axes."""

from __future__ import annotations

import enum
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ref.conformance.implementation as implementation
import ref.conformance.regenerate as regenerate
import ref.conformance.runner as runner
from ref.conformance.implementation import Implementation
from ref.testing.catalog_types import Area, Flag, Variant
from ref.testing.compare import compare_exact
from ref.testing.params import variant_params
from ref.testing.vector_files import Case, VectorSpec


class Direction(enum.Enum):
    UP = "up"
    DOWN = "down"


def step(x, *, direction: str, double: bool, by: int):
    """x moved `by` steps (each of 2 when `double`), up or down; arguments are checked
    with their JSON type, as an oracle checks them."""
    if direction not in ("up", "down") or not isinstance(double, bool) or type(by) is not int:
        raise TypeError(f"step: direction={direction!r}, double={double!r}, by={by!r}")
    x = np.asarray(x)
    if x.dtype != np.int32:
        raise TypeError(f"x: expected int32, got {x.dtype}")
    return x + np.int32((2 if double else 1) * by * (1 if direction == "up" else -1))


def _vectors():
    x = np.arange(-3, 4, dtype=np.int32)
    return [
        VectorSpec("one step up", ("Random",), Case({"x": x}, {"direction": "up"})),
        VectorSpec("the step size is open", ("Random",), Case({"x": x}, {"direction": "down", "by": 2}),
                   result="acceptable", latitude=("double",)),
        VectorSpec("an int64 input is refused", ("Random",), Case({"x": x.astype(np.int64)}), result="invalid"),
    ]


@st.composite
def _examples(draw, supported):
    x = np.array(draw(st.lists(st.integers(-100, 100), max_size=5)), dtype=np.int32)
    return Case({"x": x}, draw(variant_params(supported)))


OP = Area("toy", spec="spec/conformance.md").exact(
    "step", step, anchor="the-runner", summary="int32 -> int32 moved by a step", vectors=_vectors,
    examples=_examples, compare=lambda e, a: compare_exact(e, a),
    variants=(Variant("direction", Direction, "up", "which way"),
              Variant("double", (False, True), False, "steps of 2", latitude=True),
              Variant("by", (1, 2, 3), 1, "how many steps")))
CATALOG = {OP.name: OP}


@pytest.fixture
def toy(monkeypatch, tmp_path):
    """The toy op as the whole catalog, and its golden folder written."""
    for module in (implementation, regenerate, runner):
        monkeypatch.setattr(module, "discover", lambda: CATALOG)
    monkeypatch.setattr(regenerate, "flags", lambda: {"Random": Flag("any bug", "random values")})
    regenerate.write(tmp_path)
    return tmp_path


def test_golden_params_and_alternatives_are_native_json(toy):
    assert regenerate.check(toy) == []
    doc = json.loads((toy / "toy" / "step.json").read_text())
    assert doc["variants"]["double"]["values"] == [False, True]
    assert doc["variants"]["by"]["values"] == [1, 2, 3]
    first, acceptable, invalid = doc["vectors"]
    assert first["params"] == {"direction": "up", "double": False, "by": 1}
    assert acceptable["params"] == {"direction": "down", "by": 2, "double": False}
    assert list(acceptable["alternatives"]) == ["double=true"]
    assert invalid["params"] == {}


def _run(toy, fn, **declared):
    impl = Implementation("toy", {OP.name: fn}, variants={OP.name: declared} if declared else {})
    (row,) = runner.run(impl, golden=toy, examples=20, shrink=False).ops
    return row


def test_the_runner_calls_with_native_values_and_accepts_the_open_latitude(toy):
    calls = []

    def doubled(**kw):
        calls.append({k: v for k, v in kw.items() if k != "x"})
        return step(**{**kw, "double": True})

    assert _run(toy, step, by=[1, 2, 3], direction=["up", "down"]).verdict == "pass"
    row = _run(toy, doubled, by=[1, 2, 3])
    assert row.verdict == "fail"  # doubling is open on vector 2 only, not on vector 1
    assert all(type(c["double"]) is bool and type(c["by"]) is int for c in calls), calls
    row = _run(toy, doubled, double=[True], direction=["up", "down"], by=[1, 2, 3])
    assert row.verdict == "pass"  # declared: held to it, vector 2 judged against its stored alternative
    assert (row.vectors_run, row.vectors_skipped) == (2, 1)  # vector 1 pins double=false


def test_a_wrong_step_fails(toy):
    row = _run(toy, lambda **kw: step(**kw) + np.int32(1))
    assert row.verdict == "fail"
    assert row.failures[0].where == "vector 1"


def test_an_op_nothing_judged_is_not_a_pass(toy):
    manifest = json.loads((toy / "manifest.json").read_text())
    del manifest["ops"][OP.name]  # the op's vectors gone from the folder, and no examples
    (toy / "manifest.json").write_text(json.dumps(manifest))
    impl = Implementation("toy", {OP.name: step})
    (row,) = runner.run(impl, golden=toy, examples=0, shrink=False).ops
    assert row.verdict == "fail" and row.failures[0].comment == "nothing judged this op"
    (row,) = runner.run(impl, golden=toy, examples=5, shrink=False).ops
    assert row.verdict == "pass" and row.examples == 5  # examples alone judge it


@pytest.mark.parametrize("declared, words", [
    ({"double": ["true"]}, ["toy.step.double", "[False, True]", "'true' is a str", "write True"]),
    ({"by": ["2"]}, ["toy.step.by", "[1, 2, 3]", "'2' is a str", "write 2"]),
    ({"by": [True]}, ["toy.step.by", "True"]),
    ({"by": [4]}, ["toy.step.by", "[1, 2, 3]", "[4]"]),
    ({"direction": ["sideways"]}, ["toy.step.direction", "['up', 'down']"]),
    ({"direction": "up"}, ["toy.step.direction", "a list of values"]),
    ({"colour": ["red"]}, ["no variant axis 'colour'"]),
])
def test_declared_values_are_checked_with_their_json_type(toy, declared, words):
    impl = Implementation("toy", {OP.name: step}, variants={OP.name: declared})
    with pytest.raises(ValueError) as info:
        impl.supported(OP)
    for w in words:
        assert w in str(info.value), str(info.value)


def test_declared_values_are_what_the_runner_supports(toy):
    impl = Implementation("toy", {OP.name: step}, variants={OP.name: {"double": [True, False], "by": [3]}})
    assert impl.supported(OP) == {"direction": ("up",), "double": (True, False), "by": (3,)}


def test_variant_params_draws_only_supported_values():
    supported = {"direction": ("down",), "double": (False, True), "by": (2, 3)}
    seen = set()

    @settings(max_examples=60, database=None)
    @given(variant_params(supported))
    def check(params):
        assert list(params) == list(supported)
        assert all(params[a] in supported[a] and type(params[a]) is type(supported[a][0]) for a in supported)
        seen.add((params["double"], params["by"]))

    check()
    assert seen == {(d, b) for d in (False, True) for b in (2, 3)}  # every combination is reachable

    @settings(max_examples=5, database=None)
    @given(variant_params(supported, only=["by"]))
    def only_by(params):
        assert list(params) == ["by"]

    only_by()

    @settings(max_examples=1, database=None)
    @given(variant_params(supported, only=["colour"]))
    def unknown(params):
        pass

    with pytest.raises(ValueError, match="colour"):
        unknown()
