"""The suite's teeth: every wrong kernel in the corpus is rejected with a vector
named, and independent correct implementations pass."""

from __future__ import annotations

import pytest
from corpus.formats_impls import BUGS, bug, table_codec
from corpus.kernel_bugs import KERNEL_BUGS, SR_TOP16_DECLARED

from ref.conformance.adapters import DEFAULT as DEFAULT_IMPL
from ref.conformance.implementation import Implementation, load_implementation
from ref.conformance.runner import parse_entries, run
from ref.testing.vector_files import load_manifest


# That each bug is rejected by a golden vector carrying its flag: test_runner_corpus_rule.py.


# Bugs that only golden vectors catch: random examples almost never hit them.
VECTOR_ONLY = {"stochastic carry needs strictly more than one", "FP4 pack accepts codes above 15",
               "stochastic bits broadcast from a shorter array"}


@pytest.mark.parametrize("name", sorted(set(BUGS) - VECTOR_ONLY))
def test_bug_is_rejected_by_properties_alone(name):
    """Random examples and exhaustive sweeps catch the bug without the golden files."""
    impl = bug(name)
    report = run(impl, examples=100, shrink=False, skips=_all_vectors(impl.ops))
    assert sum(r.vectors_run for r in report.ops) == 0
    assert not report.ok, f"{name}: the properties accepted it"


def _all_vectors(ops):
    manifest = load_manifest()["ops"]
    text = "\n".join(f"{op}/{i} properties only" for op in ops for i in range(1, manifest[op]["vectors"] + 1))
    return parse_entries(text)


@pytest.mark.deep  # every variant of every element format through the runner: about 30 s
def test_table_codec_with_every_variant_passes():
    report = run(table_codec(kinds=("encode", "encode_stochastic", "decode", "pack")), examples=15, shrink=False)
    assert report.ok, report.details()
    assert {r.verdict for r in report.ops if r.verdict != "not covered"} == {"pass"}
    assert sum(r.vectors_run for r in report.ops) > 500


# That the default (ml_dtypes' casts and the NumPy kernels) passes every op: test_default_adapter.py.


def test_ml_dtypes_claiming_the_default_overflow_is_rejected():
    """ml_dtypes' E4M3FN gives NaN above 464; the default variant saturates at 448."""
    module = load_implementation(DEFAULT_IMPL)
    impl = Implementation("ml_dtypes, undeclared", module.ops, variants={}, dtypes=module.dtypes)
    report = run(impl, ops=["formats.float8_e4m3fn.encode"], examples=0)
    (row,) = report.ops
    assert row.verdict == "fail"
    assert any("OverflowBoundary" in f.flags or "Overflow" in f.flags for f in row.failures)


RUNNER_CAUGHT = [name for name, (_, catcher) in KERNEL_BUGS.items()
                 if catcher in ("large", "layout", "in place", "dtype", "shared", "latitude")]


@pytest.mark.parametrize("name", [
    # the large cases (2^24-element arrays, seconds each and a gigabyte) run in the deep profile
    pytest.param(name, marks=pytest.mark.deep) if KERNEL_BUGS[name][1] == "large" else name
    for name in RUNNER_CAUGHT])
def test_kernel_bug_is_rejected_by_the_runner_check(name):
    """The runner's own checks name what they caught (the flagged kernel bugs: the corpus rule)."""
    impl, catcher = KERNEL_BUGS[name]
    report = run(impl, examples=20 if catcher == "latitude" else 0, shrink=False, large=catcher == "large")
    (row,) = [r for r in report.ops if r.verdict != "not covered"]
    assert row.verdict == "fail", f"{name} accepted"
    text = "\n".join(f.describe() for f in row.failures)
    if catcher == "large":
        assert "large case" in text
    elif catcher == "layout":
        assert "layout" in text
    elif catcher == "in place":
        assert "modified its input 'x' in place" in text
    elif catcher == "dtype":
        assert "dtype" in text
    elif catcher == "shared":
        assert "share a buffer" in text
    else:
        assert "different values of 'nan'" in text


def test_a_declared_16_bit_random_number_passes():
    report = run(SR_TOP16_DECLARED, examples=20, shrink=False)
    (row,) = [r for r in report.ops if r.verdict != "not covered"]
    assert row.verdict == "pass", report.details()
    assert row.vectors_run >= 8
