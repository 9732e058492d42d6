"""The KIVI bug corpus: wrong kernels written the way KV-cache quantizers and their
cache bookkeeping go wrong, each one step changed from the default kernel
(ref.conformance.adapters.numpy_kv_kivi).

KIVI_BUGS: name -> (op, flag, kernel). `bug(name)` is the Implementation of that one op.
"""

from __future__ import annotations

import numpy as np

from corpus import patched
from ref.conformance.adapters import numpy_kv_kivi as K
from ref.conformance.implementation import Implementation
from ref.testing.flags import INVALID_INPUT, NAN

Q, PK, C, A = "kv.kivi.quantize", "kv.kivi.pack", "kv.kivi.cache", "kv.kivi.attend"
DQ, UP = "kv.kivi.dequantize", "kv.kivi.unpack"


def _keys_per_token(fn):
    """The cache's key round trip done with the values' axis (groups of channels)."""
    def replacement(original):
        def roundtrip(x, axis, bits, group):
            return original(x, "token", bits, group)
        return roundtrip
    return patched(fn, K, "roundtrip", replacement)


def _quantize_keys_per_token(x, *, axis="channel", bits=2, group=32):
    if axis == "channel" and np.asarray(x).shape[-1] % group == 0:
        return K.quantize(x, axis="token", bits=bits, group=group)
    return K.quantize(x, axis=axis, bits=bits, group=group)


def _rows_wrong_axis(original):
    """Groups cut along the other axis of the [.., T, D] matrix (the transposes swapped)."""
    def as_rows(x, axis, group):
        return original(x, {"channel": "token", "token": "channel"}.get(axis, axis), group)
    return as_rows


def _half_up(original):
    return lambda t, bits: np.floor(np.clip(t, 0, 2**bits - 1) + 0.5)


def _scale_without_levels(original):
    return lambda lo, hi, bits: (hi - lo) / lo.dtype.type(2**bits)


def _constant_group_nan(x, *, axis="channel", bits=2, group=32):
    """The reference's 0 / 0 cast as x86 casts NaN: INT_MIN codes."""
    x = np.asarray(x)
    codes, scale, mn = K.quantize(x, axis=axis, bits=bits, group=group)
    if x.dtype.kind == "f" and x.ndim == 4 and (scale == 0).any():
        rows = K.as_rows(codes, axis, group).copy()
        flat = K.as_rows(scale, axis, 1)[:, 0] == 0
        rows[flat] = np.iinfo(np.int32).min
        codes = K.from_rows(rows, codes.shape, axis)
    return codes, scale, mn


def _float32_arithmetic(x, *, axis="channel", bits=2, group=32):
    x = np.asarray(x)
    if x.dtype != np.float16:
        return K.quantize(x, axis=axis, bits=bits, group=group)
    codes, scale, mn = K.quantize(x.astype(np.float32), axis=axis, bits=bits, group=group)
    return codes, scale.astype(np.float16), mn.astype(np.float16)


def _pack_high_first(codes, *, axis="channel", bits=2):
    codes = np.asarray(codes)
    dim = 2 if axis == "channel" else 3
    per = 32 // bits
    if codes.ndim == 4 and codes.shape[dim] % per == 0 and codes.dtype.kind in "iu":
        c = np.moveaxis(codes, dim, -1)
        c = c.reshape(*c.shape[:-1], -1, per)[..., ::-1].reshape(c.shape)
        codes = np.ascontiguousarray(np.moveaxis(c, -1, dim))
    return K.pack(codes, axis=axis, bits=bits)


def _prefill_counts_off_by_one(original):
    def counts(p, residual):
        nk, nv = original(p, residual)
        return nk, max(nv - 1, 0) if p > residual else nv  # one value too many kept full
    return counts


def _prefill_keys_when_equal_full(original):
    def counts(p, residual):
        nk, nv = original(p, residual)
        return (0 if p <= residual else nk), nv  # P == R treated as P < R
    return counts


def _keys_flush_at_r_plus_one(original):
    return lambda full, residual: full == residual + 1


def _values_flush_at_r(original):
    return lambda full, residual: full >= residual


class _StaleKeys(K.KiviCache):
    """After a key flush the view reads the flushed keys from the full-precision store."""

    def cache(self):
        keys, values = super().cache()
        n = self.kq.shape[2]
        if n and (self.k.shape[2] - n) == 0:  # right after a flush
            keys = keys.copy()
            keys[:, :, n - self.residual:n] = self.k[:, :, n - self.residual:n]
        return keys, values


class _FlushNotEmptied(K.KiviCache):
    """Flushed keys stay in the full buffer too: they appear twice."""

    def cache(self):
        keys, values = super().cache()
        n = self.kq.shape[2]
        if n and self.k.shape[2] - n < self.residual:
            last = self.k[:, :, n - min(n, self.residual):n]
            keys = np.concatenate([self.kq, last, self.k[:, :, n:]], 2)
        return keys, values


def _cache_with(name: str, replacement):
    class Patched(K.KiviCache):
        def prefill(self, keys, values):
            return patched(super().prefill, K, name, replacement)(keys, values)

        def decode(self, keys, values):
            return patched(super().decode, K, name, replacement)(keys, values)
    return Patched


class _CacheKeysPerToken(K.KiviCache):
    def prefill(self, keys, values):
        return _keys_per_token(super().prefill)(keys, values)

    def decode(self, keys, values):
        return _keys_per_token(super().decode)(keys, values)


def _attend_one_width(q, k, v, **kw):
    """The values quantized at the keys' width."""
    return K.attend(q, k, v, **{**kw, "bits_v": kw.get("bits_k", 2)})


def _attend_stale_full(q, k, v, **kw):
    """Attention over the keys and values before quantization (the full-precision copy)."""
    return K.attend(q, k, v, **{**kw, "bits_k": 8, "bits_v": 8}) if np.asarray(k).shape[2] else K.attend(q, k, v, **kw)


# ADV15 (kivi): bugs an adversary's one-change kernels showed the vectors let through.

def _any_bits(original):
    """The width check gone: 1 and 16 bits run (16 bits: L = 65535 overflows float16)."""
    return lambda bits: int(bits)


def _decode_rows(codes, scale, mn, axis, group):
    """code * scale + mn with no check at all (the dequantization step alone)."""
    scale = np.asarray(scale)
    rows = K.as_rows(np.asarray(codes), axis, group)
    s, m = K.as_rows(scale, axis, 1), K.as_rows(np.asarray(mn), axis, 1)
    return K.from_rows(rows.astype(scale.dtype) * s + m, np.shape(codes), axis)


def _dequantize_top_only(codes, scale, mn, *, axis="channel", bits=2, group=32):
    """The code range checked at the top only: a negative code decodes as code * scale + mn."""
    c = np.asarray(codes)
    if c.dtype.kind in "iu" and c.ndim == 4 and c.size and c.min() < 0 <= 2**bits - 1 - c.max():
        return _decode_rows(c, scale, mn, axis, group)
    return K.dequantize(codes, scale, mn, axis=axis, bits=bits, group=group)


def _dequantize_float_codes(codes, scale, mn, *, axis="channel", bits=2, group=32):
    """Float codes cast to integers instead of refused."""
    c = np.asarray(codes)
    if c.dtype.kind == "f" and np.isfinite(c).all():
        c = c.astype(np.int64)
    return K.dequantize(c, scale, mn, axis=axis, bits=bits, group=group)


def _dequantize_mn_broadcast(codes, scale, mn, *, axis="channel", bits=2, group=32):
    """Only the scale's shape checked: an mn that broadcasts is broadcast."""
    s, m = np.asarray(scale), np.asarray(mn)
    if m.shape != s.shape and m.ndim == s.ndim:
        try:
            m = np.broadcast_to(m, s.shape)
        except ValueError:
            pass
    return K.dequantize(codes, scale, m, axis=axis, bits=bits, group=group)


def _dequantize_nan_ok(codes, scale, mn, *, axis="channel", bits=2, group=32):
    """scale and mn not checked for NaN or Inf: they run through the arithmetic."""
    s, m = np.asarray(scale), np.asarray(mn)
    if s.dtype.kind == "f" and m.dtype == s.dtype and not (np.isfinite(s).all() and np.isfinite(m).all()):
        return _decode_rows(codes, s, m, axis, group)
    return K.dequantize(codes, scale, mn, axis=axis, bits=bits, group=group)


def _pack_negative_masked(codes, *, axis="channel", bits=2):
    """A negative code's low b bits packed (its two's complement field) instead of refused."""
    c = np.asarray(codes)
    if c.dtype.kind == "i" and c.size and c.min() < 0:
        c = c & (2**bits - 1)
    return K.pack(c, axis=axis, bits=bits)


def _unpack_int64(words, *, axis="channel", bits=2):
    """int64 words truncated to their low 32 bits instead of refused."""
    w = np.asarray(words)
    return K.unpack(w.astype(np.int32) if w.dtype == np.int64 else w, axis=axis, bits=bits)


def _unpack_any_rank(words, *, axis="channel", bits=2):
    """The rank not checked: rank 3 and 5 words unpacked along the same axis number."""
    w = np.asarray(words)
    if w.ndim == 5:
        return K.unpack(w.reshape(-1, *w.shape[2:]), axis=axis, bits=bits).reshape(*w.shape[:2], -1, *w.shape[3:])
    if w.ndim == 3:
        return K.unpack(w[None], axis=axis, bits=bits)[0]
    return K.unpack(words, axis=axis, bits=bits)


class _RequantizeHistory(K.KiviCache):
    """At a key flush the dequantized key history and the window quantized again as one
    tensor (transformers' QuantizedCache), not the R new keys alone."""

    def decode(self, keys, values):
        before = None if self.kq is None else self.kq.shape[2]
        obs = super().decode(keys, values)
        if before and self.kq.shape[2] > before:
            history = np.concatenate([self.kq[:, :, :before], self.k[:, :, before:self.kq.shape[2]]], 2)
            self.kq = K.roundtrip(history, "channel", self.bits_k, self.group)
            obs = self.observe()
        return obs


class _KeysBeforeValues(K.KiviCache):
    """decode validates and appends the keys, then validates the values: a refused value
    leaves its key in the cache."""

    def decode(self, keys, values):
        if self.k is not None:
            self.k = np.concatenate([self.k, self._arr(keys, 1)], 2)  # appended before the values are checked
            self._arr(values, 1)  # a refusal here leaves the key appended
            self.k = self.k[:, :, :-1]  # both valid: decode as the default kernel does
        return super().decode(keys, values)


class _Float64AsFloat32(K.KiviCache):
    """A float64 cache stored and quantized in float32."""

    def __init__(self, *, dtype="float16", **kw):
        super().__init__(dtype="float32" if dtype == "float64" else dtype, **kw)


class _Bits8AsBits4(K.KiviCache):
    """No 8-bit key path: bits_k 8 falls back to 4."""

    def __init__(self, *, bits_k=2, **kw):
        super().__init__(bits_k=4 if bits_k == 8 else bits_k, **kw)


def _attend_float16_cache(q, k, v, **kw):
    """The cache built in float16 whatever k's dtype (float32 and float64 k, v rounded)."""
    return K.attend(q, np.asarray(k).astype(np.float16), np.asarray(v).astype(np.float16), **kw)


class _MemoizedAttend:
    """attend memoizes the dequantized cache on (shape, dtype, params): a second call of the
    same shapes and params reads the first call's cache."""

    def __init__(self):
        self.memo = {}

    def __call__(self, q, k, v, **kw):
        k, v = np.asarray(k), np.asarray(v)
        key = (k.shape, str(k.dtype), tuple(sorted(kw.items())))
        if key not in self.memo:
            self.memo[key] = (k, v)
        return K.attend(q, *self.memo[key], **kw)


KIVI_BUGS = {
    "keys quantized per token instead of per channel": (Q, "KiviKeyAxis", _quantize_keys_per_token),
    "cache keys quantized per token": (C, "KiviKeyAxis", _CacheKeysPerToken),
    "group min and max on the wrong axis": (Q, "KiviGroupAxis", patched(K.quantize, K, "as_rows", _rows_wrong_axis)),
    "half up where the reference rounds half to even": (Q, "KiviRoundingTies",
                                                         patched(K.quantize, K, "round_codes", _half_up)),
    "scale without the 2^b - 1": (Q, "KiviScaleLevels", patched(K.quantize, K, "scale_of", _scale_without_levels)),
    "constant group: NaN cast to INT_MIN": (Q, "KiviConstantGroup", _constant_group_nan),
    "float16 keys quantized in float32": (Q, "KiviArithmeticDtype", _float32_arithmetic),
    "codes packed high-first in the word": (PK, "KiviPackOrder", _pack_high_first),
    "residual window off by one (R - 1 values kept full at prefill)": (
        C, "KiviResidualWindow", _cache_with("prefill_counts", _prefill_counts_off_by_one)),
    "prefill of exactly R keeps every key full": (
        C, "KiviResidualWindow", _cache_with("prefill_counts", _prefill_keys_when_equal_full)),
    "keys flushed at R + 1": (C, "KiviKeyFlush", _cache_with("key_flush_due", _keys_flush_at_r_plus_one)),
    "values flushed at R instead of R + 1": (C, "KiviValueFlush", _cache_with("value_flush_due", _values_flush_at_r)),
    "stale full-precision keys read after a flush": (C, "KiviStaleBuffer", _StaleKeys),
    "flushed keys left in the full buffer": (C, "KiviStaleBuffer", _FlushNotEmptied),
    "attention reads the cache at 8 bits where 2 are declared": (A, "KiviKeyAxis", _attend_stale_full),
    "quantize accepts 1 and 16 bits": (Q, INVALID_INPUT, patched(K.quantize, K, "check_bits", _any_bits)),
    "dequantize accepts 1 and 16 bits": (DQ, INVALID_INPUT, patched(K.dequantize, K, "check_bits", _any_bits)),
    "pack accepts 1 and 16 bits": (PK, INVALID_INPUT, patched(K.pack, K, "check_bits", _any_bits)),
    "unpack accepts 1 and 16 bits": (UP, INVALID_INPUT, patched(K.unpack, K, "check_bits", _any_bits)),
    "dequantize decodes a negative code": (DQ, INVALID_INPUT, _dequantize_top_only),
    "dequantize casts float codes": (DQ, INVALID_INPUT, _dequantize_float_codes),
    "dequantize broadcasts an mn of the wrong shape": (DQ, INVALID_INPUT, _dequantize_mn_broadcast),
    "dequantize runs a NaN scale or an Inf mn": (DQ, NAN, _dequantize_nan_ok),
    "pack masks a negative code into its field": (PK, INVALID_INPUT, _pack_negative_masked),
    "unpack truncates int64 words": (UP, INVALID_INPUT, _unpack_int64),
    "unpack takes words of any rank": (UP, INVALID_INPUT, _unpack_any_rank),
    "key flush re-quantizes the key history": (C, "KiviRequantize", _RequantizeHistory),
    "a refused value leaves its key in the cache": (C, "KiviStaleState", _KeysBeforeValues),
    "a float64 cache kept in float32": (C, "KiviArithmeticDtype", _Float64AsFloat32),
    "8-bit keys quantized at 4 bits": (C, "KiviScaleLevels", _Bits8AsBits4),
    "attend builds a float16 cache for float32 and float64 k, v": (A, "KiviArithmeticDtype", _attend_float16_cache),
    "attend memoizes the dequantized cache across calls": (A, "KiviStaleState", _MemoizedAttend()),
    "attend quantizes the values at the keys' width": (A, "KiviBitsPerTensor", _attend_one_width),
}

# The default profile runs every entry but three cache and two attend ones of ADV15 (each
# replays every trace, 0.2 to 0.6 s on a loaded machine): `pytest -m deep` runs those.
DEFAULT_PROFILE = set(KIVI_BUGS) - {"a float64 cache kept in float32", "8-bit keys quantized at 4 bits",
                                    "a refused value leaves its key in the cache",
                                    "attend builds a float16 cache for float32 and float64 k, v",
                                    "attend memoizes the dequantized cache across calls"}


def bug(name: str) -> Implementation:
    op, _, kernel = KIVI_BUGS[name]
    return Implementation(f"bug: {name}", {op: kernel}, variants={op: K.VARIANTS[op]})
