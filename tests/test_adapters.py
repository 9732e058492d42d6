"""The DLPack helpers that turn framework kernels into catalog callables."""

from __future__ import annotations

import numpy as np
import pytest

from ref.conformance.adapters import as_numpy, wrap
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
