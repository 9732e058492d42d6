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

Q, PK, C, A = "kv.kivi.quantize", "kv.kivi.pack", "kv.kivi.cache", "kv.kivi.attend"


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


def _attend_stale_full(q, k, v, **kw):
    """Attention over the keys and values before quantization (the full-precision copy)."""
    return K.attend(q, k, v, **{**kw, "bits_k": 8, "bits_v": 8}) if np.asarray(k).shape[2] else K.attend(q, k, v, **kw)


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
}


def bug(name: str) -> Implementation:
    op, _, kernel = KIVI_BUGS[name]
    return Implementation(f"bug: {name}", {op: kernel}, variants={op: K.VARIANTS[op]})
