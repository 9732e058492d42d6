"""KIVI's cache bookkeeping and attention over it (spec/kv.md#kivi-cache, #kivi-attend).

The reference (jy-yuan/KIVI@876b4d2, models/llama_kivi.py) keeps, per layer, quantized
keys and values and two full-precision buffers, with a residual length R (a multiple of
the group G):

  prefill of P tokens: keys: P < R: all full; else the first P - P % R quantized, the
      last P % R full (P % R == 0: none full). Values: P <= R: all full; else the first
      P - R quantized, the last R full.
  decode of one token: appended to both full buffers (attention of that step reads the
      cache now, before any flush); then keys: when the full buffer holds R tokens, all R
      are quantized (groups of G tokens per channel) and the buffer empties; values: when
      it holds R + 1, the oldest token is quantized (groups of G channels) and R stay.

`KiviCache` is that object (a stream op: each step's observation is the four counts and
the dequantized concatenation [dequantized | full] of keys and of values). `attend` is
attention of q over the cache a prefill of (k, v) leaves.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import integer
from ref.attention import attend as attention
from ref.attention.emulate import attend as attention_at
from ref.kv.kivi import BITS, DTYPES, dequantize, quantize

__all__ = ["KiviCache", "attend", "attend_emulated", "dequantized_cache", "prefill_split"]


def prefill_split(p: int, residual: int) -> tuple[int, int]:
    """(keys quantized, values quantized) after a prefill of p tokens: p - p % R (0 when
    p < R) and max(p - R, 0)."""
    p = integer(p, "p", minimum=0)
    residual = integer(residual, "residual", minimum=1)
    return (0 if p < residual else p - p % residual), max(p - residual, 0)


class KiviCache:
    """KIVI's per-layer cache: prefill(keys, values) once, then decode(keys, values) of
    one token each; each returns `observe()`. Arrays [B, H, T, D] in `dtype`."""

    def __init__(self, *, bits_k: int = 2, bits_v: int = 2, group: int = 32, residual: int = 128,
                 dtype: str = "float16"):
        self.bits_k = integer(bits_k, "bits_k", choices=BITS)
        self.bits_v = integer(bits_v, "bits_v", choices=BITS)
        self.group = integer(group, "group", minimum=1)
        self.residual = integer(residual, "residual", minimum=1)
        if self.residual % self.group:
            raise ValueError(f"residual: expected a multiple of group {self.group}, got {self.residual}")
        if dtype not in ("float16", "float32", "float64"):
            raise ValueError(f"dtype: expected 'float16', 'float32' or 'float64', got {dtype!r}")
        self.dtype = np.dtype(dtype)
        self.k_quant: list[NDArray] = []  # dequantized chunks [B, H, n, D], oldest first
        self.v_quant: list[NDArray] = []
        self.k_full: NDArray | None = None  # None before prefill
        self.v_full: NDArray | None = None

    def _tensor(self, x: Any, name: str, tokens: int | None = None) -> NDArray:
        arr = np.asarray(x)
        if arr.dtype.kind not in "iuf" or arr.ndim != 4:
            raise ValueError(f"{name}: expected numbers [B, H, T, D], got {arr.dtype} of shape {arr.shape}")
        with np.errstate(over="ignore"):
            out = arr.astype(self.dtype)  # beyond the dtype's range: Inf, refused below
        if not np.all(np.isfinite(out)) or not np.array_equal(out.astype(np.float64), arr.astype(np.float64)):
            raise ValueError(f"{name}: expected finite values exact in {self.dtype}")
        if out.shape[3] % self.group:
            raise ValueError(f"{name}: group {self.group} does not divide head dim {out.shape[3]}")
        if tokens is not None and out.shape[2] != tokens:
            raise ValueError(f"{name}: expected {tokens} token(s), got {out.shape[2]}")
        if self.k_full is not None and out.shape[:2] + out.shape[3:] != self.k_full.shape[:2] + self.k_full.shape[3:]:
            b, h, _, d = self.k_full.shape
            raise ValueError(f"{name}: expected [B, H, tokens, D] = [{b}, {h}, tokens, {d}] as the prefill's, "
                             f"got shape {out.shape}")
        return out

    def _pair(self, keys, values, tokens: int | None = None) -> tuple[NDArray, NDArray]:
        k, v = self._tensor(keys, "keys", tokens), self._tensor(values, "values", tokens)
        if k.shape != v.shape:
            raise ValueError(f"values: expected the keys' shape {k.shape}, got {v.shape}")
        return k, v

    def _keys_quantized(self, k: NDArray) -> NDArray:
        codes, scale, mn = quantize(k, axis="channel", bits=self.bits_k, group=self.group)
        return dequantize(codes, scale, mn, axis="channel", bits=self.bits_k, group=self.group)

    def _values_quantized(self, v: NDArray) -> NDArray:
        codes, scale, mn = quantize(v, axis="token", bits=self.bits_v, group=self.group)
        return dequantize(codes, scale, mn, axis="token", bits=self.bits_v, group=self.group)

    def prefill(self, keys: Any, values: Any) -> dict:
        """The first call: P tokens split as `prefill_split` says; refused once prefilled."""
        if self.k_full is not None:
            raise ValueError("keys: the cache is already prefilled (prefill is the first call only)")
        self._split(*self._pair(keys, values))
        return self.observe()

    def _split(self, k: NDArray, v: NDArray) -> None:
        qk, qv = prefill_split(k.shape[2], self.residual)
        self.k_quant = [self._keys_quantized(k[:, :, :qk])] if qk else []
        self.v_quant = [self._values_quantized(v[:, :, :qv])] if qv else []
        self.k_full, self.v_full = k[:, :, qk:], v[:, :, qv:]

    def decode(self, keys: Any, values: Any) -> dict:
        """One token [B, H, 1, D] of each: appended, then the flushes."""
        if self.k_full is None:
            raise ValueError("keys: decode before prefill (the first call is a prefill)")
        k, v = self._pair(keys, values, tokens=1)
        self.k_full = np.concatenate([self.k_full, k], axis=2)
        self.v_full = np.concatenate([self.v_full, v], axis=2)
        if self.k_full.shape[2] == self.residual:
            self.k_quant.append(self._keys_quantized(self.k_full))
            self.k_full = self.k_full[:, :, :0]
        if self.v_full.shape[2] > self.residual:
            self.v_quant.append(self._values_quantized(self.v_full[:, :, :1]))
            self.v_full = self.v_full[:, :, 1:]
        return self.observe()

    def view(self) -> tuple[NDArray, NDArray]:
        """The dequantized concatenations (keys, values) [B, H, T, D], oldest token first."""
        if self.k_full is None:
            raise ValueError("cache: not prefilled")
        return (np.concatenate([*self.k_quant, self.k_full], axis=2),
                np.concatenate([*self.v_quant, self.v_full], axis=2))

    def counts(self) -> dict:
        """Quantized and full-precision token counts of keys and values."""
        return {"quantized_keys": sum(c.shape[2] for c in self.k_quant), "full_keys": int(self.k_full.shape[2]),
                "quantized_values": sum(c.shape[2] for c in self.v_quant), "full_values": int(self.v_full.shape[2])}

    def observe(self) -> dict:
        """counts() and the view as nested lists of floats (exact: float16/32/64 values)."""
        keys, values = self.view()
        return {**self.counts(), "keys": keys.astype(np.float64).tolist(), "values": values.astype(np.float64).tolist()}


def dequantized_cache(k: ArrayLike, v: ArrayLike, *, bits_k: int = 2, bits_v: int = 2, group: int = 32,
                      residual: int = 128) -> tuple[NDArray, NDArray]:
    """The [dequantized | full] keys and values [B, H, T, D] (in k's dtype) that a
    prefill of k, v leaves in a `KiviCache`."""
    for name, arr in (("k", k), ("v", v)):
        if np.asarray(arr).dtype not in DTYPES:
            raise TypeError(f"{name}: expected float16, float32 or float64, got {np.asarray(arr).dtype}")
    cache = KiviCache(bits_k=bits_k, bits_v=bits_v, group=group, residual=residual, dtype=str(np.asarray(k).dtype))
    cache._split(*cache._pair(k, v))  # a prefill without its JSON observation
    return cache.view()


def attend(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, bits_k: int = 2, bits_v: int = 2, group: int = 32,
           residual: int = 128, scale: float | None = None) -> NDArray[np.float64]:
    """Attention of q [B, Hq, Lq, D] over the cache that a prefill of k, v [B, H, T, D]
    leaves: `ref.attention.attend` (float64, no mask) on the `dequantized_cache`, GQA
    with Hq a multiple of H. -> out [B, Hq, Lq, D] float64."""
    keys, values = dequantized_cache(k, v, bits_k=bits_k, bits_v=bits_v, group=group, residual=residual)
    q = np.asarray(q)
    if q.ndim != 4:
        raise ValueError(f"q: expected queries [B, Hq, Lq, D], got shape {q.shape}")
    out, _ = attention(q.transpose(0, 2, 1, 3), keys.transpose(0, 2, 1, 3), values.transpose(0, 2, 1, 3),
                       scale=scale)  # attend's layout: [B, L, H, D]
    return np.ascontiguousarray(out.transpose(0, 2, 1, 3))


def attend_emulated(precision: str, q: ArrayLike, k: ArrayLike, v: ArrayLike, *, bits_k: int = 2, bits_v: int = 2,
                    group: int = 32, residual: int = 128, scale: float | None = None) -> NDArray[np.float64]:
    """`attend` as a kernel at `precision` computes it: the dequantized cache exact (in k's
    dtype, as the codec defines it), then ref.attention.emulate.attend at `precision`."""
    keys, values = dequantized_cache(k, v, bits_k=bits_k, bits_v=bits_v, group=group, residual=residual)
    q = np.asarray(q)
    if q.ndim != 4:
        raise ValueError(f"q: expected queries [B, Hq, Lq, D], got shape {q.shape}")
    out, _ = attention_at(precision, q.transpose(0, 2, 1, 3), keys.transpose(0, 2, 1, 3),
                          values.transpose(0, 2, 1, 3), scale=scale)
    return np.ascontiguousarray(out.transpose(0, 2, 1, 3))
