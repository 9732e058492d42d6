"""Integer group codecs, int32 and FP4 packing and the 128x4 scale layout for the
default run, written independently of the oracles (this module imports nothing from
ref):

- INT4/INT8 groups: a loop over the groups of a [rows, n] view, each step a float32
  operation on a column of per-row scalars (min-max with a zero point, or amax
  symmetric), rounding by np.rint (half to even);
- int32 words and FP4 bytes: shifts and ORs of unsigned integers, the AWQ order as
  a table of nibble positions;
- the blocked scale layout: padding, then reshapes and transposes of 128x4 tiles
  (no offset formula), and the inverse transposes for `from_blocked`.

The steps are public functions so that the bug corpus (tests/corpus) composes its
wrong kernels from the same code with one step changed.
"""

from __future__ import annotations

import numpy as np

NAME = "numpy groups, packing and layouts"
VERSION = np.__version__

F = np.float32
SCALE_FLOOR = F(np.finfo(F).eps)  # the smallest scale, as compressed-tensors and torchao clamp it
AWQ = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble i of an AWQ word holds element AWQ[i] of its eight
GROUPS = [128, 64, 32]


def check_weights(w: np.ndarray, group: int) -> None:
    if w.dtype not in (F, np.float16):
        raise TypeError(f"w: expected float32 or float16, got {w.dtype}")
    if w.ndim == 0 or w.shape[-1] % group:
        raise ValueError(f"w: the last axis must be a multiple of group={group}, got shape {w.shape}")
    if not np.isfinite(w).all():
        raise ValueError("w: expected finite weights (found NaN or Inf)")


def group_params(g: np.ndarray, bits: int, scheme: str) -> tuple[np.ndarray, np.ndarray]:
    """(scale float32, zero point) of each row of g [rows, group] (float32)."""
    qmax = (1 << bits) - 1
    if scheme == "asymmetric":
        lo, hi = np.minimum(g.min(axis=1), F(0)), np.maximum(g.max(axis=1), F(0))
        both_zero = (lo == 0) & (hi == 0)
        lo, hi = np.where(both_zero, F(-1), lo), np.where(both_zero, F(1), hi)
        with np.errstate(over="ignore"):
            span = F(hi) - F(lo)
        if not np.isfinite(span).all():
            raise ValueError("w: a group's range max - min overflows float32")
        scale = np.maximum(span / F(qmax), SCALE_FLOOR).astype(F)
        return scale, np.clip(np.rint(-lo / scale), 0, qmax)
    half = 1 << (bits - 1)
    amax = np.abs(g).max(axis=1)
    scale = np.where(amax > 0, np.maximum(amax / F(half - 1), SCALE_FLOOR), F(1)).astype(F)
    return scale, np.full(scale.shape, F(half))


def group_codes(g: np.ndarray, scale: np.ndarray, zero: np.ndarray, bits: int, scheme: str) -> np.ndarray:
    if scheme == "asymmetric":
        return np.clip(np.rint(g / scale[:, None]) + zero[:, None], 0, (1 << bits) - 1)
    half = 1 << (bits - 1)
    return np.clip(np.rint(g / scale[:, None]), -half, half - 1) + half


def quantize_groups(w, *, bits: int, group: int = 128, scheme: str = "asymmetric", zero_storage: str = "exact"):
    """w [..., n] -> (codes [..., n] uint8, scales [..., n/group] float32, zeros [..., n/group] uint8)."""
    w = np.asarray(w)
    check_weights(w, group)
    rows = w.astype(F).reshape(int(np.prod(w.shape[:-1])), w.shape[-1])
    ng = rows.shape[1] // group
    codes = np.zeros(rows.shape, np.uint8)
    scales, zeros = np.zeros((rows.shape[0], ng), F), np.zeros((rows.shape[0], ng), np.uint8)
    for k in range(ng):
        g = rows[:, k * group:(k + 1) * group]
        scale, zero = group_params(g, bits, scheme)
        codes[:, k * group:(k + 1) * group] = group_codes(g, scale, zero, bits, scheme)
        if zero_storage == "gptq_v1":  # stored minus one, modulo 2^bits
            zero = (zero.astype(np.int64) - 1) % (1 << bits)
        scales[:, k], zeros[:, k] = scale, zero
    lead = (*w.shape[:-1], ng)
    return codes.reshape(w.shape), scales.reshape(lead), zeros.reshape(lead)


def dequantize_groups(codes, scales, zeros, *, bits: int, group: int = 128, zero_storage: str = "exact"):
    """w[i] = f32(scale[i // group] * (q[i] - zero[i // group]))."""
    codes, scales, zeros = np.asarray(codes), np.asarray(scales), np.asarray(zeros)
    if codes.dtype != np.uint8 or zeros.dtype != np.uint8 or scales.dtype != F:
        raise TypeError(f"codes, zeros: expected uint8, scales float32; got {codes.dtype}, {zeros.dtype}, "
                        f"{scales.dtype}")
    for name, a in (("codes", codes), ("zeros", zeros)):
        if a.size and int(a.max()) >> bits:
            raise ValueError(f"{name}: INT{bits} values are below {1 << bits}, got {int(a.max())}")
    if codes.ndim == 0 or codes.shape[-1] % group:
        raise ValueError(f"codes: the last axis must be a multiple of group={group}, got shape {codes.shape}")
    lead, n = int(np.prod(codes.shape[:-1])), codes.shape[-1]
    if scales.shape != (*codes.shape[:-1], n // group) or zeros.shape != scales.shape:
        raise ValueError(f"scales, zeros: expected one per group, shape {(*codes.shape[:-1], n // group)}, got "
                         f"{scales.shape} and {zeros.shape}")
    z = zeros.reshape(lead, n // group).astype(np.int64)
    if zero_storage == "gptq_v1":
        z = (z + 1) % (1 << bits)
    out = np.zeros((lead, n), F)
    q = codes.reshape(lead, n).astype(F)
    s = scales.reshape(lead, n // group)
    for k in range(n // group):
        out[:, k * group:(k + 1) * group] = s[:, k:k + 1] * (q[:, k * group:(k + 1) * group] - F(z[:, k:k + 1]))
    return out.reshape(codes.shape)


def check_nibbles(codes: np.ndarray, per: int) -> None:
    if codes.dtype != np.uint8:
        raise TypeError(f"codes: expected uint8 codes, got {codes.dtype}")
    if codes.ndim == 0 or codes.shape[-1] % per:
        raise ValueError(f"codes: the last axis must be a multiple of {per}, got shape {codes.shape}")
    if codes.size and int(codes.max()) > 15:
        raise ValueError(f"codes: 4-bit codes are 0..15, got {int(codes.max())}")


def pack_int32(codes, *, order: str = "gptq", **_):
    """Eight 4-bit codes per int32 word: nibble i holds element i (gptq) or AWQ[i] (awq)."""
    codes = np.asarray(codes)
    check_nibbles(codes, 8)
    eights = codes.reshape(*codes.shape[:-1], codes.shape[-1] // 8, 8).astype(np.uint32)
    word = np.zeros(eights.shape[:-1], np.uint32)
    for nibble in range(8):
        element = AWQ[nibble] if order == "awq" else nibble
        word |= eights[..., element] << np.uint32(4 * nibble)
    return word.view(np.int32)


def packed_input(a, name: str, dtype, what: str) -> np.ndarray:
    """`a` as an array of packed `dtype` words with at least one axis, or the error naming `name`."""
    a = np.asarray(a)
    if a.dtype != dtype:
        raise TypeError(f"{name}: expected {what}, got {a.dtype}")
    if a.ndim == 0:
        raise ValueError(f"{name}: expected at least one axis, got a scalar")
    return a


def unpack_int32(words, *, order: str = "gptq", **_):
    words = packed_input(words, "words", np.int32, "int32")
    u = words.view(np.uint32)
    out = np.zeros((*words.shape, 8), np.uint8)
    for nibble in range(8):
        element = AWQ[nibble] if order == "awq" else nibble
        out[..., element] = (u >> np.uint32(4 * nibble)) & np.uint32(0xF)
    return out.reshape(*words.shape[:-1], 8 * words.shape[-1])


def pack_fp4(codes, *, order: str = "low_first", **_):
    """Two FP4 codes per byte: element 0 of each pair in the low nibble (low_first) or the high one."""
    codes = np.asarray(codes)
    check_nibbles(codes, 2)
    first, second = codes[..., 0::2], codes[..., 1::2]
    low, high = (first, second) if order == "low_first" else (second, first)
    return (low | (high << np.uint8(4))).astype(np.uint8)


def unpack_fp4(packed, *, order: str = "low_first", **_):
    packed = packed_input(packed, "packed", np.uint8, "uint8 bytes")
    low, high = packed & np.uint8(0xF), packed >> np.uint8(4)
    pair = (low, high) if order == "low_first" else (high, low)
    return np.stack(pair, axis=-1).reshape(*packed.shape[:-1], 2 * packed.shape[-1])


def tiles(rows: int, cols: int) -> tuple[int, int]:
    """The number of 128-row and 4-column tiles."""
    return -(-rows // 128), -(-cols // 4)


def to_blocked(scales, **_):
    """[R, C] -> tiles [R/128, C/4] in row order, each [32, 4, 4]: row 32 i + j, column c at (j, i, c)."""
    scales = np.asarray(scales)
    if scales.ndim != 2:
        raise ValueError(f"scales: expected a 2-D [rows, columns] array, got shape {scales.shape}")
    tr, tc = tiles(*scales.shape)
    padded = np.zeros((tr * 128, tc * 4), scales.dtype)
    padded[:scales.shape[0], :scales.shape[1]] = scales
    t = padded.reshape(tr, 4, 32, tc, 4)  # [tile row, i, j, tile column, c]
    return t.transpose(0, 3, 2, 1, 4).reshape(-1)  # [tile row, tile column, j, i, c]


def from_blocked(blocked, rows, cols, **_):
    blocked = np.asarray(blocked)
    rows, cols = int(rows), int(cols)
    tr, tc = tiles(rows, cols)
    if blocked.ndim != 1 or blocked.size != tr * tc * 512:
        raise ValueError(f"blocked: expected a flat array of {tr * tc * 512} scales for {rows}x{cols}, got shape "
                         f"{blocked.shape}")
    t = blocked.reshape(tr, tc, 32, 4, 4).transpose(0, 3, 2, 1, 4)  # back to [tile row, i, j, tile column, c]
    return t.reshape(tr * 128, tc * 4)[:rows, :cols]


def _group_ops(bits: int) -> dict:
    return {f"formats.int{bits}_group.quantize": lambda w, bits=bits, **v: quantize_groups(w, bits=bits, **v),
            f"formats.int{bits}_group.dequantize":
                lambda codes, scales, zeros, bits=bits, **v: dequantize_groups(codes, scales, zeros, bits=bits, **v)}


OPS = {**_group_ops(4), **_group_ops(8), "formats.int4.pack_int32": pack_int32,
       "formats.int4.unpack_int32": unpack_int32, "formats.float4_e2m1fn.pack": pack_fp4,
       "formats.float4_e2m1fn.unpack": unpack_fp4, "formats.scales.to_blocked": to_blocked,
       "formats.scales.from_blocked": from_blocked}
VARIANTS = {
    "formats.int*_group.quantize": {"scheme": ["asymmetric", "symmetric"], "group": GROUPS,
                                    "zero_storage": ["exact", "gptq_v1"]},
    "formats.int*_group.dequantize": {"group": GROUPS, "zero_storage": ["exact", "gptq_v1"]},
    "formats.int4.*pack_int32": {"order": ["gptq", "awq"]},
    "formats.float4_e2m1fn.*pack": {"order": ["low_first", "high_first"]},
}
