"""KIVI (ref.kv.kivi, ref.kv.kivi_cache): the codec's properties, the cache's
bookkeeping invariants, attention over the cache, and the documented edge cases."""

from __future__ import annotations

import numpy as np
import pytest
from corpus import kv_kivi

from ref.attention import attend as attention
from ref.conformance.implementation import load_implementation
from ref.conformance.runner import run
from ref.kv import kivi
from ref.kv.kivi_cache import KiviCache, attend, dequantized_cache, prefill_split


def _x(seed, shape, dtype=np.float16, scale=2.0**-6):
    rng = np.random.default_rng(seed)
    return (rng.integers(-200, 201, shape) * scale).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("axis", ["channel", "token"])
def test_codes_in_range_min_exact_max_within_ulps(dtype, axis):
    """Codes 0 .. 2^b - 1; a group's min has code 0 and decodes to itself exactly; its max
    has code 2^b - 1 and decodes within 4 ulps of the group's largest magnitude (exactly
    in rational arithmetic: scale * (2^b - 1) + mn = mx; the float roundings of scale
    and of the product move it by a few ulps)."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((2, 2, 32, 32)) * 3).astype(dtype)
    for bits in kivi.BITS:
        codes, scale, mn = kivi.quantize(x, axis=axis, bits=bits, group=16)
        assert codes.dtype == np.int32 and codes.min() >= 0 and codes.max() <= 2**bits - 1
        assert scale.dtype == mn.dtype == dtype
        xh = kivi.dequantize(codes, scale, mn, axis=axis, bits=bits, group=16)
        g = np.swapaxes(x, 2, 3) if axis == "channel" else x  # groups along the last axis
        gh = np.swapaxes(xh, 2, 3) if axis == "channel" else xh
        gc = np.swapaxes(codes, 2, 3) if axis == "channel" else codes
        g, gh, gc = (a.reshape(*a.shape[:-1], -1, 16) for a in (g, gh, gc))
        lo, hi = g.argmin(-1)[..., None], g.argmax(-1)[..., None]
        assert np.all(np.take_along_axis(gc, lo, -1) == 0) and np.all(np.take_along_axis(gc, hi, -1) == 2**bits - 1)
        assert np.array_equal(np.take_along_axis(gh, lo, -1), np.take_along_axis(g, lo, -1))
        err = np.abs(np.take_along_axis(gh, hi, -1) - np.take_along_axis(g, hi, -1))
        assert np.all(err <= 4 * np.spacing(np.abs(g).max(-1, keepdims=True)))


def test_half_a_step_error_and_ties_to_even():
    x = _x(1, (1, 2, 32, 16), np.float64)
    for axis in ("channel", "token"):
        codes, scale, mn = kivi.quantize(x, axis=axis, bits=4, group=8)
        xh = kivi.dequantize(codes, scale, mn, axis=axis, bits=4, group=8)
        step = np.repeat(scale, 8, axis=2 if axis == "channel" else 3)
        assert np.all(np.abs(xh - x) <= step / 2 * (1 + 1e-12))
    ties = np.array([0, 0.5, 1.5, 2.5, 3, 0, 0, 0], np.float16).reshape(1, 1, 1, 8)
    codes, _, _ = kivi.quantize(ties, axis="token", bits=2, group=8)
    assert codes.ravel()[:5].tolist() == [0, 0, 2, 2, 3]  # torch.round: half to even


@pytest.mark.parametrize("bits", kivi.BITS)
@pytest.mark.parametrize("axis", ["channel", "token"])
def test_pack_round_trip_and_word_layout(bits, axis):
    rng = np.random.default_rng(bits)
    per = 32 // bits
    shape = (1, 2, 2 * per, 3) if axis == "channel" else (1, 2, 3, 2 * per)
    codes = rng.integers(0, 2**bits, shape).astype(np.int32)
    words = kivi.pack(codes, axis=axis, bits=bits)
    assert words.dtype == np.int32 and np.array_equal(kivi.unpack(words, axis=axis, bits=bits), codes)
    one = np.zeros(shape, np.int32)
    one[(0, 0, 1, 0) if axis == "channel" else (0, 0, 0, 1)] = 1  # code 1 of word 0 sits in bits [b, 2b)
    assert kivi.pack(one, axis=axis, bits=bits).ravel()[0] == 1 << bits
    words = np.array([-1], np.int32).reshape(1, 1, 1, 1)
    assert np.all(kivi.unpack(words, axis="channel", bits=bits) == 2**bits - 1)


def test_encode_decode_and_bits_per_element():
    x = _x(2, (1, 2, 64, 32))
    state = kivi.encode(x, axis="channel", bits=2, group=32)
    assert state.words.shape == (1, 2, 4, 32) and state.scale.shape == (1, 2, 2, 32)
    codes, scale, mn = kivi.quantize(x, axis="channel", bits=2, group=32)
    assert np.array_equal(kivi.decode(state), kivi.dequantize(codes, scale, mn, axis="channel", bits=2, group=32))
    assert kivi.bits_per_element(32768, 128, bits=2, group=32, residual=128) == (
        (32768 * 128 * 3) + (32640 * 128 * 3 + 128 * 128 * 16)) / (2 * 32768 * 128)
    assert kivi.bits_per_element(100, 128, residual=128) == 16.0  # everything in the window
    assert kivi.bits_per_element(256, 128, bits=4, group=32, residual=128, part="keys") == 4 + 2 * 16 / 32


def test_prefill_split():
    assert [prefill_split(p, 4) for p in (0, 3, 4, 5, 11, 12)] == [(0, 0), (0, 0), (4, 0), (4, 1), (8, 7), (12, 8)]


def test_cache_invariants_over_a_stream():
    """After every step: quantized keys = floor(T / R) R, quantized values = max(T - R, 0);
    the full-precision part is the input itself; the quantized part is each flushed chunk
    quantized alone; nothing lost, nothing duplicated."""
    g, r = 2, 4
    for p in (0, 1, 3, 4, 5, 9):
        stream = _x(p, (1, 2, p + 11, 4))
        values = _x(p + 100, (1, 2, p + 11, 4))
        cache = KiviCache(group=g, residual=r)
        for t in range(p, p + 12):
            obs = cache.prefill(stream[:, :, :t], values[:, :, :t]) if t == p else cache.decode(
                stream[:, :, t - 1:t], values[:, :, t - 1:t])
            n = t
            assert (obs["quantized_keys"], obs["quantized_values"]) == (n // r * r, max(n - r, 0))
            assert obs["quantized_keys"] + obs["full_keys"] == n == obs["quantized_values"] + obs["full_values"]
            keys, vals = cache.view()
            qk, qv = obs["quantized_keys"], obs["quantized_values"]
            assert np.array_equal(keys[:, :, qk:], stream[:, :, qk:n]) and np.array_equal(vals[:, :, qv:], values[:, :, qv:n])
            if qk > p - p % r:  # the last flushed key chunk: R tokens quantized together
                chunk = stream[:, :, qk - r:qk]
                c, s, m = kivi.quantize(chunk, axis="channel", bits=2, group=g)
                assert np.array_equal(keys[:, :, qk - r:qk], kivi.dequantize(c, s, m, axis="channel", bits=2, group=g))
            c, s, m = kivi.quantize(values[:, :, :qv], axis="token", bits=2, group=g)
            assert np.array_equal(vals[:, :, :qv], kivi.dequantize(c, s, m, axis="token", bits=2, group=g))


def test_attend_equals_attend_on_the_dequantized_cache():
    rng = np.random.default_rng(3)
    q = (rng.integers(-64, 65, (1, 4, 3, 8)) / 64).astype(np.float16)
    k, v = _x(4, (1, 2, 29, 8)), _x(5, (1, 2, 29, 8))
    keys, values = dequantized_cache(k, v, group=4, residual=8)
    out, _ = attention(q.transpose(0, 2, 1, 3), keys.transpose(0, 2, 1, 3), values.transpose(0, 2, 1, 3))
    assert np.array_equal(attend(q, k, v, group=4, residual=8), out.transpose(0, 2, 1, 3))
    plain, _ = attention(q.transpose(0, 2, 1, 3), k[:, :, :5].transpose(0, 2, 1, 3), v[:, :, :5].transpose(0, 2, 1, 3))
    assert np.array_equal(attend(q, k[:, :, :5], v[:, :, :5], group=4, residual=8), plain.transpose(0, 2, 1, 3))


def test_edge_cases_as_documented():
    const = np.full((1, 1, 4, 4), 1.5, np.float16)
    codes, scale, mn = kivi.quantize(const, axis="channel", bits=2, group=4)
    assert np.all(codes == 0) and np.all(scale == 0)
    assert np.array_equal(kivi.dequantize(codes, scale, mn, axis="channel", bits=2, group=4), const)
    empty = np.zeros((1, 2, 0, 8), np.float16)
    assert kivi.quantize(empty, axis="channel", bits=2, group=4)[0].shape == (1, 2, 0, 8)
    cache = KiviCache(group=2, residual=4)
    cache.prefill(empty[..., :4], empty[..., :4])
    assert cache.counts() == {"quantized_keys": 0, "full_keys": 0, "quantized_values": 0, "full_values": 0}
    assert attend(np.ones((1, 2, 1, 8), np.float16), empty, empty, group=4, residual=8).tolist() == [[[[0.0] * 8]] * 2]


@pytest.mark.parametrize("call, match", [
    (lambda: kivi.quantize(np.zeros((1, 1, 6, 4), np.float16), axis="channel", group=4), "group: 4 does not divide"),
    (lambda: kivi.quantize(np.zeros((1, 1, 4, 6), np.float16), axis="token", group=4), "group: 4 does not divide"),
    (lambda: kivi.quantize(np.zeros((1, 1, 4, 4), np.float16), bits=3, group=4), "bits"),
    (lambda: kivi.quantize(np.full((1, 1, 4, 4), np.nan, np.float16), group=4), "x: NaN"),
    (lambda: kivi.quantize(np.zeros((1, 1, 4, 4), np.int8), group=4), "x: expected float16"),
    (lambda: kivi.quantize(np.zeros((1, 1, 4, 4), np.float16), axis="tokens", group=4), "axis"),
    (lambda: kivi.pack(np.full((1, 1, 16, 1), 4, np.int32), bits=2), "codes: expected codes in 0 .. 3"),
    (lambda: kivi.unpack(np.zeros((1, 1, 1, 1), np.int64)), "words: expected int32"),
    (lambda: KiviCache(group=4, residual=6), "residual: expected a multiple of group 4"),
    (lambda: KiviCache(group=2, residual=4).decode(np.zeros((1, 1, 1, 4)), np.zeros((1, 1, 1, 4))), "decode before"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


@pytest.mark.deep
def test_default_kernel_passes_and_every_bug_fails_on_random_examples():
    assert run(load_implementation("ref.conformance.adapters.numpy_kv_kivi"), ops=["kv.kivi.*"], examples=40).ok
    for name in kv_kivi.KIVI_BUGS:
        assert not run(kv_kivi.bug(name), examples=20).ok, name


def _attend_at(dtype):
    """The default kernel's attention with its output rounded to `dtype` (a kernel at that precision)."""
    from ref.conformance.adapters import numpy_kv_kivi as K

    def kernel(q, k, v, **kw):
        return K.attend(q, k, v, **kw).astype(dtype)
    return kernel


@pytest.mark.deep  # about 4 s: the failing controls are diagnosed vector by vector
def test_attend_bound_passes_kernels_at_each_precision_and_rejects_controls():
    from ml_dtypes import bfloat16

    from ref.conformance.implementation import Implementation

    op = "kv.kivi.attend"
    for dtype in (np.float16, np.float32, bfloat16):
        assert run(Implementation(f"at {dtype}", {op: _attend_at(dtype)}), ops=[op], examples=0).ok, dtype
    controls = {"zeros": lambda q, k, v, **kw: np.zeros(np.shape(q), np.float32),
                "keys never quantized": lambda q, k, v, **kw: _attend_at(np.float32)(
                    q, k, v, **{**kw, "residual": 1 << 20})}
    for name, kernel in controls.items():
        assert not run(Implementation(name, {op: kernel}), ops=[op], examples=0).ok, name
