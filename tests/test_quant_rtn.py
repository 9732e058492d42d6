"""Round-to-nearest group quantization (ref.quant.rtn): the conventions cross-checked
against each other and against ref.formats.intgroup, the MSE search's guarantees, the
broadcasting rule the GPTQ column loop relies on, and the default kernel."""

from __future__ import annotations

import numpy as np
import pytest
from corpus import quant_rtn

from ref.conformance.adapters import numpy_quant_codecs, numpy_quant_packing
from ref.conformance.implementation import Implementation
from ref.conformance.runner import run
from ref.formats import intgroup
from ref.quant import rtn


def _layer(seed, shape=(16, 256), dtype=np.float32):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape) * 0.02
    w[:, 7] *= 25  # an outlier input channel
    return w.astype(dtype)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("scheme", ["asymmetric", "symmetric"])
def test_equal_to_intgroup_at_4_and_8_bits(bits, scheme):
    """intgroup's asymmetric is GPTQ's min-max with the epsilon floor; its symmetric
    is `symmetric_restricted`."""
    w = _layer(bits)
    w[3, :128] = 0  # an all-zero group
    w[4, 128:] = np.abs(w[4, 128:])  # a non-negative group
    mine = "asymmetric" if scheme == "asymmetric" else "symmetric_restricted"
    codes, scales, zeros = intgroup.quantize(w, bits=bits, group=128, scheme=scheme)
    c, s, z = rtn.quantize_groups(w, bits=bits, group=128, scheme=mine, scale_floor="eps")
    np.testing.assert_array_equal(c, codes)
    np.testing.assert_array_equal(s, scales)
    np.testing.assert_array_equal(z, zeros)
    back = intgroup.dequantize(codes, scales, zeros, bits=bits, group=128)
    np.testing.assert_array_equal(rtn.dequantize_groups(c, s, z, group=128), back)


def test_compressed_tensors_symmetric_is_gptq_symmetric_when_a_weight_is_negative():
    """2 amax / maxq equals (amax - (-amax)) / maxq; they part only on groups with no
    negative weight, where GPTQ keeps lo = 0."""
    w = _layer(1, (64, 32))
    w[:8] = np.abs(w[:8])
    for bits in rtn.BITS:
        a = rtn.params(w, bits=bits, scheme="symmetric")
        b = rtn.params(w, bits=bits, scheme="symmetric_compressed_tensors")
        negative = (w < 0).any(axis=-1)
        np.testing.assert_array_equal(a[0][negative], b[0][negative])
        np.testing.assert_array_equal(a[1], b[1])
        assert (a[0][~negative] * 2 == b[0][~negative]).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dequantized_weights_within_half_a_step(dtype):
    """include_zero asymmetric: every weight is inside [scale * (0 - zero), scale * (maxq - zero)]
    up to the zero point's rounding, so none is clipped by more than half a step."""
    w = _layer(2, dtype=dtype)
    for bits in rtn.BITS:
        c, s, z = rtn.quantize_groups(w, bits=bits, group=32)
        back = rtn.dequantize_groups(c, s, z, group=32)
        assert back.dtype == dtype and c.dtype == np.int64
        assert c.min() >= 0 and c.max() <= 2**bits - 1
        step = np.repeat(s, 32, axis=-1)
        assert (np.abs(back.astype(np.float64) - w) <= step * (0.5 + 1e-6)).all()


def test_mse_search_never_worse_than_the_full_range():
    w = _layer(3, (32, 128))
    for bits in (2, 3, 4):
        for scheme in ("asymmetric", "symmetric"):
            def err(s, z):
                back = rtn.dequantize(rtn.quantize(w, s, z, bits=bits), s, z)
                return (np.abs(back.astype(np.float64) - w) ** 2.4).sum(axis=-1)
            full = err(*rtn.params(w, bits=bits, scheme=scheme))
            best = err(*rtn.mse_params(w, bits=bits, scheme=scheme))
            assert (best <= full).all()
            assert (best < full).any()  # the outlier channel makes shrinking pay somewhere


def test_column_broadcast_for_the_gptq_loop():
    """scale [rows] against w[:, j] [rows] is one scale per element (as many axes);
    against w [rows, g] the last axis is added (one axis fewer)."""
    w = _layer(4, (8, 16))
    s, z = rtn.params(w, bits=4)
    whole = rtn.quantize(w, s, z, bits=4)
    for j in (0, 7, 15):
        np.testing.assert_array_equal(rtn.quantize(w[:, j], s, z, bits=4), whole[:, j])
        np.testing.assert_array_equal(rtn.dequantize(whole[:, j], s, z),
                                      rtn.dequantize(whole, s, z)[:, j])
    with pytest.raises(ValueError, match="scale"):
        rtn.quantize(w, s[:4], z[:4], bits=4)


@pytest.mark.parametrize("call, match", [
    (lambda: rtn.params(np.float32([1.0, np.nan]), bits=4), "w"),
    (lambda: rtn.params(np.ones(4, np.float32), bits=5), "bits"),
    (lambda: rtn.params(np.ones(4, np.float32), bits=4, scheme="sym"), "scheme"),
    (lambda: rtn.params(np.ones(4, np.float32), bits=4, zero_range="all"), "zero_range"),
    (lambda: rtn.quantize(np.ones(4, np.float32), np.float32(0), np.float32(8), bits=4), "scale"),
    (lambda: rtn.quantize(np.ones(4, np.float32), np.float32(1), np.float32(16), bits=4), "zero"),
    (lambda: rtn.quantize(np.ones(4, np.float32), np.float32(1), np.float32(2.5), bits=4), "zero"),
    (lambda: rtn.dequantize(np.int64([16]), np.float32(1), np.float32(0), bits=4), "codes"),
    (lambda: rtn.quantize_groups(np.ones((2, 48), np.float32), group=32), "group"),
    (lambda: rtn.quantize_groups(np.ones((2, 48), np.float32), group=0), "group"),
    (lambda: rtn.mse_params(np.ones((2, 8), np.float32), bits=4, maxshrink=1.5), "maxshrink"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


def test_edge_cases_as_documented():
    zeros = np.zeros((1, 8), np.float32)
    s, z = rtn.params(zeros, bits=4)  # GPTQ's -1, +1 range
    assert s[0] == np.float32(2 / 15) and z[0] == 7  # 1 / f32(2/15) = 7.4999996 rounds to 7, as in torch
    s, z = rtn.params(zeros, bits=4, scheme="symmetric_restricted")
    assert s[0] == 1 and z[0] == 8
    s, z = rtn.params(np.float32([[0.5, 0.25]]), bits=4, scheme="symmetric")  # non-negative: lo stays 0
    assert s[0] == np.float32(0.5 / 15) and z[0] == 8
    s, _ = rtn.params(np.float32([[2.0**-140, 0.0]]), bits=4)  # a scale that underflows: the floor
    assert s[0] == np.finfo(np.float32).tiny
    s, z = rtn.params(np.float32([[0.25] * 4]), bits=4, zero_range="minmax", span_floor=1e-5)  # AutoAWQ's clamp
    assert s[0] == np.float32(np.float32(1e-5) / 15) and z[0] == 0
    s, z = rtn.params(np.float32([[0.5, 0.25]]), bits=4)  # lo = 0: zero point +0, never -0
    assert z[0] == 0 and not np.signbit(z[0])
    c, s, z = rtn.quantize_groups(np.float32([[0.1, -0.2, 0.3]]), group=1)  # groups of 1: range ends
    assert c.tolist() == [[15, 0, 15]]


@pytest.mark.deep  # the default profile runs the kernel in test_default_adapter and the bugs in the corpus rule
def test_default_kernel_and_bugs_through_the_runner():
    """The default kernel passes the vectors; two corpus entries fail them."""
    impl = Implementation("numpy quant codecs", numpy_quant_codecs.OPS, variants=numpy_quant_codecs.VARIANTS)
    assert run(impl, ops=list(numpy_quant_codecs.OPS), examples=0).ok
    for name in ("zero point off by one", "codes rounded half away from zero"):
        assert not run(quant_rtn.bug(name), examples=0).ok


@pytest.mark.deep
@pytest.mark.parametrize("kernel, examples", [(numpy_quant_codecs, 300), (numpy_quant_packing, 100)])
def test_default_kernels_on_random_examples(kernel, examples):
    impl = Implementation(kernel.NAME, kernel.OPS, variants=kernel.VARIANTS)
    report = run(impl, ops=list(kernel.OPS), examples=examples, shrink=False)
    assert report.ok, report.details()


def test_gptq_reference_transcription_in_torch():
    """IST-DASLab/gptq's Quantizer.find_params and quantize, transcribed in torch float32
    (torch.round is half to even): equal bit for bit on random layers at every width."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    for trial in range(40):
        bits, sym = rtn.BITS[trial % 4], bool(trial % 2)
        w = (rng.standard_normal((32, 64)) * 0.02).astype(np.float32)
        w[::5] = np.abs(w[::5])
        w[3] = 0
        x = torch.from_numpy(w.copy())
        maxq = 2**bits - 1
        xmin = torch.minimum(x.min(1)[0], torch.zeros(32))
        xmax = torch.maximum(x.max(1)[0], torch.zeros(32))
        if sym:
            xmax = torch.maximum(torch.abs(xmin), xmax)
            xmin = torch.where(xmin < 0, -xmax, xmin)
        dead = (xmin == 0) & (xmax == 0)
        xmin, xmax = torch.where(dead, -1.0, xmin), torch.where(dead, 1.0, xmax)
        scale = (xmax - xmin) / maxq
        zero = torch.full_like(scale, (maxq + 1) / 2) if sym else torch.round(-xmin / scale)
        q = torch.clamp(torch.round(x / scale[:, None]) + zero[:, None], 0, maxq)
        s, z = rtn.params(w, bits=bits, scheme="symmetric" if sym else "asymmetric")
        np.testing.assert_array_equal(s, scale.numpy())
        np.testing.assert_array_equal(z, zero.numpy() + 0)
        np.testing.assert_array_equal(rtn.quantize(w, s, z, bits=bits), q.numpy().astype(np.int64))
