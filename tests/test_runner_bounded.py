"""The runner on bounded ops: the candidate's precision (declared or read from its
output), declined features (NotImplementedError), the worst/tolerance report."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ref.attention.emulate import attend as attend_emulated
from ref.conformance.implementation import Implementation
from ref.conformance.runner import run
from ref.formats import round_to

ALL = {"sink_in_lse": ["included", "excluded"]}


def _impl(fn, **kw):
    return Implementation("test", {"attention.attend": fn}, variants={"attention.attend": ALL}, **kw)


def _bf16_kernel(**kw):
    return attend_emulated("bfloat16", **kw)  # float64 arrays holding bfloat16 values


def test_a_declared_precision_is_the_yardstick():
    ok = run(_impl(_bf16_kernel, precision={"attention.*": "bfloat16"}), ops=["attention.attend"], examples=10)
    assert ok.ok, ok.details()
    (row,) = [r for r in ok.ops if r.op == "attention.attend"]
    assert row.unit == "of tolerance" and 0 <= row.worst <= 1
    # the same numbers claimed as float64 are far outside float64's bound
    bad = run(_impl(_bf16_kernel), ops=["attention.attend"], examples=0)
    assert not bad.ok


def test_the_precision_is_read_from_the_output_dtype():
    def kernel(**kw):
        out, lse = attend_emulated("bfloat16", **kw)
        return out.astype(ml_dtypes.bfloat16), lse.astype(np.float32)

    assert run(_impl(kernel), ops=["attention.attend"], examples=10).ok


def test_an_output_dtype_without_a_precision_is_a_failure_that_says_so():
    def kernel(**kw):
        out, lse = attend_emulated("bfloat16", **kw)
        return out.astype(ml_dtypes.float8_e4m3fn), lse

    report = run(_impl(kernel), ops=["attention.attend"], examples=0)
    (row,) = [r for r in report.ops if r.op == "attention.attend"]
    assert row.verdict == "fail" and "PRECISION" in row.failures[0].detail


def test_declined_features_are_skipped_and_counted():
    from ref.attention.attend import attend

    def no_sinks(sinks=None, softcap=0.0, **kw):
        if sinks is not None or softcap:
            raise NotImplementedError("no sinks, no softcap")
        return attend(softcap=softcap, **kw)

    report = run(_impl(no_sinks), ops=["attention.attend"], examples=20)
    (row,) = [r for r in report.ops if r.op == "attention.attend"]
    assert report.ok and row.verdict == "pass" and row.unsupported > 0
    assert row.vectors_skipped >= 8 and any("NotImplementedError" in n for n in row.notes)

    def nothing(**kw):
        raise NotImplementedError

    report = run(_impl(nothing), ops=["attention.attend"], examples=5)
    (row,) = [r for r in report.ops if r.op == "attention.attend"]
    assert row.verdict == "skipped" and row.compared == 0


def test_a_kernel_wrong_only_where_it_declines_nothing_else_still_fails():
    def half_right(sinks=None, **kw):
        if sinks is not None:
            raise NotImplementedError
        out, lse = attend_emulated("float32", **kw)
        return np.zeros_like(out), lse

    assert not run(_impl(half_right), ops=["attention.attend"], examples=0).ok


def test_bad_precision_declarations_are_named():
    with pytest.raises(ValueError, match="precision"):
        _impl(_bf16_kernel, precision={"attention.*": "float8"})
    with pytest.raises(ValueError, match="precision"):
        _impl(_bf16_kernel, precision={"formats.*": "float32"})


@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_round_to_agrees_with_ml_dtypes_on_float32_inputs(precision):
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    x = x[np.isfinite(x)]  # NaN payload casts warn; NaN and Inf are covered by the codec's own tests
    with np.errstate(over="ignore"):  # overflow to +-inf is the expected answer
        want = x.astype({"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[precision]).astype(np.float64)
    got = round_to(x, precision)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    assert same.all(), x[~same][:5]
    assert np.array_equal(round_to(x, "float32"), x.astype(np.float64), equal_nan=True)
    with pytest.raises(ValueError, match="precision"):
        round_to(x, "float8")
