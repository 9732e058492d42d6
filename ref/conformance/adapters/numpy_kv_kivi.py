"""KIVI's KV-cache codec, its cache bookkeeping and attention over it, for the default
run, written independently of the oracles (this module imports nothing from ref):

- quantize: the tensor laid out as the reference's kernel sees it (keys transposed to
  [B, H, D, T]), groups as the rows of a [rows, G] matrix, each step one NumPy
  operation in the input's dtype, np.rint (ties to even) after np.clip;
- pack and unpack: Python-int shifts in int64, one code position at a time, the word
  folded into int32 by subtracting 2^32 where bit 31 is set;
- the cache: every token kept in arrival order with two counters (keys and values
  quantized so far) and the dequantized tokens kept beside them;
- attention: a float32 softmax over [dequantized | full] keys and values.

The steps are public so that the bug corpus (tests/corpus/kv_kivi.py) builds its
wrong kernels from this code with one step changed.
"""

from __future__ import annotations

import numpy as np

NAME = "numpy KIVI codec, cache and float32 attention"
VERSION = np.__version__

_FLOATS = (np.float16, np.float32, np.float64)


def check_cache(x, name: str) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.type not in _FLOATS:
        raise TypeError(f"{name}: expected float16/32/64, got {x.dtype}")
    if x.ndim != 4:
        raise ValueError(f"{name}: expected [B, H, T, D], got {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name}: NaN or Inf")
    return x


def check_bits(bits) -> int:
    if bits not in (2, 4, 8) or isinstance(bits, bool):
        raise ValueError(f"bits: expected 2, 4 or 8, got {bits!r}")
    return int(bits)


def as_rows(x: np.ndarray, axis: str, group: int) -> np.ndarray:
    """[rows, G]: keys transposed to [B, H, D, T] then cut along T; values cut along D."""
    if axis not in ("channel", "token"):
        raise ValueError(f"axis: expected 'channel' or 'token', got {axis!r}")
    if group < 1:
        raise ValueError(f"group: expected a positive integer, got {group}")
    y = np.swapaxes(x, 2, 3) if axis == "channel" else x
    if y.shape[-1] % group:
        raise ValueError(f"group: {group} does not divide {y.shape[-1]}")
    return y.reshape(-1, group)


def from_rows(rows: np.ndarray, shape, axis: str) -> np.ndarray:
    b, h, t, d = shape
    if axis == "channel":
        return np.swapaxes(rows.reshape(b, h, d, t), 2, 3)
    return rows.reshape(b, h, t, d)


def group_shape(shape, axis: str, group: int) -> tuple:
    b, h, t, d = shape
    return (b, h, t // group, d) if axis == "channel" else (b, h, t, d // group)


def scale_of(lo, hi, bits):
    return (hi - lo) / lo.dtype.type(2**bits - 1)


def round_codes(t, bits):
    return np.rint(np.clip(t, 0, 2**bits - 1))


def quantize(x, *, axis="channel", bits=2, group=32):
    bits = check_bits(bits)
    x = check_cache(x, "x")
    rows = as_rows(x, axis, group)
    lo = rows.min(axis=1, initial=np.inf)[:, None] if rows.size else rows[:, :1]
    hi = rows.max(axis=1, initial=-np.inf)[:, None] if rows.size else rows[:, :1]
    with np.errstate(all="ignore"):
        scale = scale_of(lo, hi, bits)
        if not np.isfinite(scale).all():
            raise ValueError("x: a group's range overflows the dtype")
        t = (rows - lo) / np.where(scale > 0, scale, 1)
    t = np.where(scale > 0, t, 0)
    codes = from_rows(round_codes(t, bits).astype(np.int32), x.shape, axis)
    gs = group_shape(x.shape, axis, group)
    def arrange(col):
        return from_rows(col, gs, axis)
    return codes, arrange(scale.astype(x.dtype)), arrange(lo.astype(x.dtype))


def dequantize(codes, scale, mn, *, axis="channel", bits=2, group=32):
    bits = check_bits(bits)
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu" or codes.ndim != 4:
        raise TypeError(f"codes: expected integer [B, H, T, D], got {codes.dtype} {codes.shape}")
    if codes.size and not (0 <= codes.min() and codes.max() < 2**bits):
        raise ValueError("codes: out of range")
    scale, mn = check_cache(scale, "scale"), check_cache(mn, "mn")
    if scale.dtype != mn.dtype:
        raise TypeError("mn: expected the scale's dtype")
    rows = as_rows(codes, axis, group)
    gs = group_shape(codes.shape, axis, group)
    if scale.shape != gs or mn.shape != gs:
        raise ValueError(f"scale, mn: expected {gs}")
    s = as_rows(scale, axis, 1)
    m = as_rows(mn, axis, 1)
    return from_rows(rows.astype(scale.dtype) * s + m, codes.shape, axis)


def pack(codes, *, axis="channel", bits=2):
    bits = check_bits(bits)
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu" or codes.ndim != 4:
        raise TypeError(f"codes: expected integer [B, H, T, D], got {codes.dtype}")
    if codes.size and not (0 <= codes.min() and codes.max() < 2**bits):
        raise ValueError("codes: out of range")
    dim = 2 if axis == "channel" else 3
    per = 32 // bits
    if codes.shape[dim] % per:
        raise ValueError(f"codes: axis {dim} not a multiple of {per}")
    c = np.moveaxis(codes.astype(np.int64), dim, 0)
    words = np.zeros((c.shape[0] // per, *c.shape[1:]), np.int64)
    for j in range(per):
        words |= c[j::per] << (bits * j)
    words = np.where(words >= 2**31, words - 2**32, words).astype(np.int32)
    return np.moveaxis(words, 0, dim)


def unpack(words, *, axis="channel", bits=2):
    bits = check_bits(bits)
    words = np.asarray(words)
    if words.dtype != np.int32 or words.ndim != 4:
        raise TypeError(f"words: expected int32 [B, H, ., .], got {words.dtype}")
    dim = 2 if axis == "channel" else 3
    per = 32 // bits
    w = np.moveaxis(words.astype(np.int64) & 0xFFFFFFFF, dim, 0)
    out = np.zeros((w.shape[0] * per, *w.shape[1:]), np.int32)
    for j in range(per):
        out[j::per] = (w >> (bits * j)) & (2**bits - 1)
    return np.moveaxis(out, 0, dim)


def roundtrip(x, axis, bits, group):
    codes, scale, mn = quantize(x, axis=axis, bits=bits, group=group)
    return dequantize(codes, scale, mn, axis=axis, bits=bits, group=group)


def key_flush_due(full_keys: int, residual: int) -> bool:
    return full_keys == residual


def value_flush_due(full_values: int, residual: int) -> bool:
    return full_values > residual


def prefill_counts(p: int, residual: int) -> tuple[int, int]:
    return (p // residual * residual), max(p - residual, 0)


class KiviCache:
    """All tokens in arrival order, the dequantized ones beside them, and two counters."""

    def __init__(self, *, bits_k=2, bits_v=2, group=32, residual=128, dtype="float16"):
        self.bits_k, self.bits_v = check_bits(bits_k), check_bits(bits_v)
        if group < 1 or residual < 1 or residual % group:
            raise ValueError(f"residual: expected a positive multiple of group {group}, got {residual}")
        if dtype not in ("float16", "float32", "float64"):
            raise ValueError(f"dtype: unsupported {dtype!r}")
        self.group, self.residual, self.dtype = group, residual, np.dtype(dtype)
        self.k = self.v = self.kq = self.vq = None  # kq, vq: dequantized prefixes

    def _arr(self, x, tokens=None):
        raw = np.asarray(x, dtype=np.float64)
        if raw.ndim != 4 or raw.shape[3] % self.group:
            raise ValueError(f"keys/values: bad shape {raw.shape}")
        with np.errstate(over="ignore"):
            a = raw.astype(self.dtype)
        if not np.isfinite(a).all() or not (a.astype(np.float64) == raw).all():
            raise ValueError("keys/values: not finite or not exact in the cache dtype")
        if tokens is not None and a.shape[2] != tokens:
            raise ValueError("keys/values: a decode step takes one token")
        if self.k is not None and (a.shape[:2] != self.k.shape[:2] or a.shape[3] != self.k.shape[3]):
            raise ValueError("keys/values: shape differs from the cache's")
        return a

    def prefill(self, keys, values):
        if self.k is not None:
            raise ValueError("prefill: already prefilled")
        k, v = self._arr(keys), self._arr(values)
        if k.shape != v.shape:
            raise ValueError("values: shape differs from keys")
        nk, nv = prefill_counts(k.shape[2], self.residual)
        self.k, self.v = k, v
        self.kq = roundtrip(k[:, :, :nk], "channel", self.bits_k, self.group)
        self.vq = roundtrip(v[:, :, :nv], "token", self.bits_v, self.group)
        return self.observe()

    def decode(self, keys, values):
        if self.k is None:
            raise ValueError("decode: not prefilled")
        k, v = self._arr(keys, 1), self._arr(values, 1)
        self.k, self.v = np.concatenate([self.k, k], 2), np.concatenate([self.v, v], 2)
        full_k = self.k.shape[2] - self.kq.shape[2]
        if key_flush_due(full_k, self.residual):
            new = roundtrip(self.k[:, :, self.kq.shape[2]:], "channel", self.bits_k, self.group)
            self.kq = np.concatenate([self.kq, new], 2)
        full_v = self.v.shape[2] - self.vq.shape[2]
        if value_flush_due(full_v, self.residual):
            n = self.vq.shape[2]
            self.vq = np.concatenate([self.vq, roundtrip(self.v[:, :, n:n + 1], "token", self.bits_v, self.group)], 2)
        return self.observe()

    def cache(self):
        keys = np.concatenate([self.kq, self.k[:, :, self.kq.shape[2]:]], 2)
        values = np.concatenate([self.vq, self.v[:, :, self.vq.shape[2]:]], 2)
        return keys, values

    def observe(self):
        keys, values = self.cache()
        return {"quantized_keys": int(self.kq.shape[2]), "full_keys": int(self.k.shape[2] - self.kq.shape[2]),
                "quantized_values": int(self.vq.shape[2]), "full_values": int(self.v.shape[2] - self.vq.shape[2]),
                "keys": keys.astype(np.float64).tolist(), "values": values.astype(np.float64).tolist()}


def attend(q, k, v, *, bits_k=2, bits_v=2, group=32, residual=128, scale=None):
    """float32 softmax attention of q [B, Hq, Lq, D] over the prefilled cache."""
    k, v = check_cache(k, "k"), check_cache(v, "v")
    cache = KiviCache(bits_k=bits_k, bits_v=bits_v, group=group, residual=residual, dtype=str(k.dtype))
    cache.prefill(k, v)
    keys, values = (a.astype(np.float32) for a in cache.cache())
    q = np.asarray(q).astype(np.float32)
    b, hq, lq, d = q.shape
    h = keys.shape[1]
    if hq % h or keys.shape[0] != b or keys.shape[3] != d:
        raise ValueError(f"q: {q.shape} does not fit the cache {keys.shape}")
    keys, values = np.repeat(keys, hq // h, axis=1), np.repeat(values, hq // h, axis=1)
    if keys.shape[2] == 0:
        return np.zeros(q.shape, np.float32)
    s = np.float32(1 / np.sqrt(d) if scale is None else scale) * (q @ np.swapaxes(keys, 2, 3))
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p @ values) / p.sum(axis=-1, keepdims=True)


OPS = {
    "kv.kivi.quantize": quantize,
    "kv.kivi.dequantize": dequantize,
    "kv.kivi.pack": pack,
    "kv.kivi.unpack": unpack,
    "kv.kivi.cache": KiviCache,
    "kv.kivi.attend": attend,
}
VARIANTS = {
    "kv.kivi.quantize": {"axis": ["channel", "token"], "bits": [2, 4, 8], "group": [32, 16, 8, 4, 2, 128]},
    "kv.kivi.dequantize": {"axis": ["channel", "token"], "bits": [2, 4, 8], "group": [32, 16, 8, 4, 2, 128]},
    "kv.kivi.pack": {"axis": ["channel", "token"], "bits": [2, 4, 8]},
    "kv.kivi.unpack": {"axis": ["channel", "token"], "bits": [2, 4, 8]},
    "kv.kivi.cache": {"bits_k": [2, 4, 8], "bits_v": [2, 4, 8], "group": [32, 2, 4, 8, 16],
                      "residual": [128, 4, 8, 16, 32], "dtype": ["float16", "float32", "float64"]},
    "kv.kivi.attend": {"bits_k": [2, 4, 8], "bits_v": [2, 4, 8]},
}
