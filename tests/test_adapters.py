"""The DLPack helpers that turn framework kernels into catalog callables."""

from __future__ import annotations

import numpy as np
import pytest

from ref.conformance.adapters import as_numpy, wrap
from ref.conformance.adapters._casts import cast_ops
from ref.conformance.implementation import Implementation
from ref.conformance.runner import run
from ref.formats import encode


class HostTensor:
    """A minimal non-NumPy array type speaking DLPack (stands in for a framework)."""

    def __init__(self, array):
        self.array = np.asarray(array)

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class DeviceTensor:
    """An array on a 'device' that must be copied to the host first (like torch .cpu())."""

    def __init__(self, array):
        self.array = np.asarray(array)

    def cpu(self):
        return HostTensor(self.array)


def test_as_numpy_reads_dlpack_and_device_arrays():
    a = np.arange(6, dtype=np.uint8).reshape(2, 3)
    assert np.array_equal(as_numpy(HostTensor(a)), a)
    assert np.array_equal(as_numpy(DeviceTensor(a)), a)
    assert as_numpy(a) is a
    assert np.array_equal(as_numpy([1, 2]), [1, 2])


def test_wrap_makes_a_passing_catalog_callable():
    def kernel(t, rounding="nearest_even"):  # a "framework kernel" over HostTensors
        return DeviceTensor(encode(np.from_dlpack(t), "float8_e4m3fn", rounding=rounding))

    fn = wrap(kernel, HostTensor, params=("rounding",))
    impl = Implementation("wrapped", {"formats.float8_e4m3fn.encode": fn},
                          variants={"formats.float8_e4m3fn.encode": {"rounding": ["nearest_even", "toward_zero"]}})
    report = run(impl, ops=["formats.float8_e4m3fn.encode"], examples=10, shrink=False)
    assert report.ok and report.ops[0].verdict == "pass"
    assert report.ops[0].vectors_run > 20


def test_wrap_with_torch():
    torch = pytest.importorskip("torch")
    fn = wrap(lambda t: t.to(torch.float8_e5m2).view(torch.uint8), torch.from_dlpack)
    x = np.float32([1.0, -2.5, 1e-6])
    assert np.array_equal(fn(x=x, rounding="nearest_even", overflow="nonsaturating"),
                          encode(x, "float8_e5m2", overflow="nonsaturating"))


def _numpy_cast_ops():
    """A 'library' whose only format is numpy's own float16 cast, through the shared helper."""
    return cast_ops({"float16": np.float16}, to_codes=lambda x, dt: x.astype(dt).view(np.uint16),
                    to_values=lambda c, dt: c.view(dt).astype(np.float32))


def test_cast_ops_build_a_passing_implementation():
    ops = _numpy_cast_ops()
    assert set(ops) == {"formats.float16.encode", "formats.float16.decode"}
    impl = Implementation("numpy float16 casts", ops, variants={},
                          dtypes={"formats.*.encode": {"x": ["float32", "float16", "float64"]}})
    report = run(impl, examples=5, shrink=False)
    assert report.ok, report.details()
    assert {r.verdict for r in report.ops if r.verdict != "not covered"} == {"pass"}


@pytest.mark.parametrize("call, error, word", [
    (lambda ops: ops["formats.float16.encode"](x=np.int32([1])), TypeError, "x"),
    (lambda ops: ops["formats.float16.decode"](codes=np.uint8([1])), TypeError, "codes"),
])
def test_cast_ops_check_their_arguments(call, error, word):
    with pytest.raises(error, match=word):
        call(_numpy_cast_ops())


def test_cast_ops_reject_dirty_bits_of_sub_byte_codes():
    ops = cast_ops({"float4_e2m1fn": None}, to_codes=None, to_values=lambda c, dt: c.astype(np.float32))
    with pytest.raises(ValueError, match="low 4 bits"):
        ops["formats.float4_e2m1fn.decode"](codes=np.uint8([1, 0x10]))
    assert ops["formats.float4_e2m1fn.decode"](codes=np.uint8([1, 15])).tolist() == [1.0, 15.0]
