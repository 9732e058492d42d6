"""The packed checkpoint layouts for the default run, written independently of the
oracles (this module imports nothing from ref): each run of codes becomes one Python
integer (code k shifted left by k * bits), cut into 32-bit words by masks; the AWQ
order is a table of positions; g_idx is built by a loop over the quantization order.

The steps are public so that the bug corpus (tests/corpus/quant_rtn.py) builds its
wrong kernels from this code with one step changed.
"""

from __future__ import annotations

import numpy as np

NAME = "numpy checkpoint packing"
VERSION = np.__version__

AWQ_POSITIONS = [0, 4, 1, 5, 2, 6, 3, 7]  # code c of eight sits in nibble AWQ_POSITIONS[c]
MASK32 = (1 << 32) - 1


def check_codes(codes, bits: int, name: str, ndim: int = 2) -> np.ndarray:
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu":
        raise TypeError(f"{name}: integer codes expected, got {codes.dtype}")
    if codes.ndim != ndim:
        raise ValueError(f"{name}: {ndim} axes expected, got {codes.shape}")
    if codes.size and (codes.min() < 0 or codes.max() >= 2**bits):
        raise ValueError(f"{name}: codes must fit in {bits} bits")
    return codes.astype(np.int64)


def check_words(words, name: str) -> np.ndarray:
    words = np.asarray(words)
    if words.dtype != np.int32 or words.ndim != 2:
        raise TypeError(f"{name}: 2-d int32 words expected, got {words.dtype} {words.shape}")
    return words


def row_to_words(row, bits: int, nwords: int) -> list[int]:
    """One run of codes -> nwords 32-bit words (as ints), codes laid low bits first."""
    big = 0
    for k, c in enumerate(row):
        big |= int(c) << (k * bits)
    return [(big >> (32 * j)) & MASK32 for j in range(nwords)]


def words_to_row(words, bits: int, count: int) -> list[int]:
    big = 0
    for j, w in enumerate(words):
        big |= (int(w) & MASK32) << (32 * j)
    return [(big >> (k * bits)) & ((1 << bits) - 1) for k in range(count)]


def to_int32(values) -> np.ndarray:
    return np.array(values, dtype=np.uint64).astype(np.uint32).view(np.int32)


def pack_rows(codes: np.ndarray, bits: int, nwords: int) -> np.ndarray:
    out = [row_to_words(r, bits, nwords) for r in codes]
    return to_int32(out).reshape(codes.shape[0], nwords)


def unpack_rows(words: np.ndarray, bits: int, count: int) -> np.ndarray:
    return np.array([words_to_row(r, bits, count) for r in words], dtype=np.int64).reshape(words.shape[0], count)


def _gptq_bits(bits: int) -> int:
    if bits not in (2, 3, 4, 8):
        raise ValueError(f"bits: GPTQ packs 2, 3, 4 or 8 bits, got {bits}")
    return bits


def whole(n: int, bits: int, name: str) -> int:
    if n * bits % 32:
        raise ValueError(f"{name}: {n} codes of {bits} bits leave a partial word")
    return n * bits // 32


def gptq_qweight(codes, *, bits=4):
    bits = _gptq_bits(bits)
    codes = check_codes(codes, bits, "codes")
    return np.ascontiguousarray(pack_rows(codes, bits, whole(codes.shape[1], bits, "codes")).T)


def gptq_unpack_qweight(qweight, *, bits=4):
    bits = _gptq_bits(bits)
    q = check_words(qweight, "qweight")
    return unpack_rows(np.ascontiguousarray(q.T), bits, q.shape[0] * 32 // bits)


def gptq_qzeros(zeros, *, bits=4, zero_format="v1"):
    bits = _gptq_bits(bits)
    z = check_codes(zeros, bits, "zeros")
    if zero_format == "v1":
        z = (z + (2**bits - 1)) % 2**bits  # minus one, modulo 2^bits
    zt = np.ascontiguousarray(z.T)
    return pack_rows(zt, bits, whole(zt.shape[1], bits, "zeros"))


def gptq_unpack_qzeros(qzeros, *, bits=4, zero_format="v1"):
    bits = _gptq_bits(bits)
    q = check_words(qzeros, "qzeros")
    z = unpack_rows(q, bits, q.shape[1] * 32 // bits)
    if zero_format == "v1":
        z = (z + 1) % 2**bits
    return np.ascontiguousarray(z.T)


def gptq_repair_v1(qzeros, *, bits=4):
    return gptq_qzeros(gptq_unpack_qzeros(qzeros, bits=bits, zero_format="v1"), bits=bits, zero_format="v2")


def gptq_g_idx(perm, *, group=128, static_groups=False):
    perm = np.asarray(perm)
    if perm.dtype.kind not in "iu" or perm.ndim != 1:
        raise TypeError("perm: a 1-d integer permutation expected")
    n = len(perm)
    if sorted(perm.tolist()) != list(range(n)):
        raise ValueError("perm: not a permutation")
    if not isinstance(static_groups, (bool, np.bool_)):
        raise TypeError("static_groups: a bool expected")
    size = n if group == -1 else group
    if group == 0 or group < -1 or (size and n % size):
        raise ValueError(f"group: {group} does not split {n} columns")
    out = np.zeros(n, np.int32)
    for position, column in enumerate(perm.tolist()):
        target = position if static_groups else column
        out[target] = position // size if size else 0
    return out


def dequant(codes, zeros, scales, groups):
    """codes [out, in], zeros [out, G], scales [G, out], groups [in] -> float32 [out, in]."""
    scales = np.asarray(scales)
    if scales.dtype not in (np.float16, np.float32):
        raise TypeError(f"scales: float16 or float32 expected, got {scales.dtype}")
    if scales.shape != (zeros.shape[1], zeros.shape[0]) or zeros.shape[0] != codes.shape[0]:
        raise ValueError("scales, qzeros: shapes do not match qweight")
    groups = np.asarray(groups)
    if groups.dtype.kind not in "iu" or groups.shape != (codes.shape[1],):
        raise ValueError("g_idx: one integer per input channel expected")
    if groups.size and (groups.min() < 0 or groups.max() >= zeros.shape[1]):
        raise ValueError("g_idx: a group out of range")
    out = np.empty(codes.shape, np.float32)
    for i, g in enumerate(groups.tolist()):
        out[:, i] = scales[g].astype(np.float32) * (codes[:, i] - zeros[:, g]).astype(np.float32)
    return out


def gptq_dequantize(qweight, qzeros, scales, g_idx, *, bits=4, zero_format="v1"):
    codes = gptq_unpack_qweight(qweight, bits=bits)
    zeros = gptq_unpack_qzeros(qzeros, bits=bits, zero_format=zero_format)
    return dequant(codes, zeros, scales, g_idx)


def awq_pack(codes):
    codes = check_codes(codes, 4, "codes")
    if codes.shape[0] % 8:
        raise ValueError("codes: output channels must be a multiple of 8")
    t = codes.T  # [n, out]
    out = np.zeros((t.shape[0], t.shape[1] // 8), np.uint32)
    for c in range(t.shape[1]):
        out[:, c // 8] |= t[:, c].astype(np.uint32) << np.uint32(4 * AWQ_POSITIONS[c % 8])
    return out.view(np.int32)


def awq_unpack(words):
    w = check_words(words, "words").view(np.uint32)
    codes = np.zeros((w.shape[1] * 8, w.shape[0]), np.int64)
    for c in range(codes.shape[0]):
        codes[c] = (w[:, c // 8] >> np.uint32(4 * AWQ_POSITIONS[c % 8])) & np.uint32(15)
    return codes


def awq_dequantize(qweight, qzeros, scales, *, group=128):
    codes, zeros = awq_unpack(qweight), awq_unpack(qzeros)
    n = codes.shape[1]
    size = n if group == -1 else group
    if group == 0 or group < -1 or (size and (n % size or n // size != zeros.shape[1])):
        raise ValueError(f"group: {group} does not match the groups of qzeros")
    return dequant(codes, zeros, scales, np.arange(n) // size if size else np.zeros(0, np.int64))


def ct_pack(value, *, bits=4, packed_dim=1, layout="dense"):
    value = np.asarray(value)
    if value.dtype != np.int8:
        raise TypeError(f"value: int8 expected, got {value.dtype}")
    if not 1 <= bits <= 8:
        raise ValueError(f"bits: 1..8 expected, got {bits}")
    codes = check_codes(value.astype(np.int64) + 2 ** (bits - 1), bits, "value")
    if packed_dim == 0:
        codes = codes.T
    n = codes.shape[1]
    if layout == "dense":
        words = pack_rows(codes, bits, -(-n * bits // 32))
    else:
        per = 32 // bits
        nwords = -(-n // per)
        words = to_int32([[w for j in range(nwords) for w in row_to_words(r[j * per:(j + 1) * per], bits, 1)]
                          for r in codes]).reshape(codes.shape[0], nwords)
    return np.ascontiguousarray(words.T if packed_dim == 0 else words)


def ct_unpack(packed, *, count, bits=4, packed_dim=1, layout="dense"):
    words = check_words(packed, "packed")
    if packed_dim == 0:
        words = words.T
    count = int(count)
    per = 32 // bits
    room = words.shape[1] * 32 // bits if layout == "dense" else words.shape[1] * per
    if count < 0 or count > room:
        raise ValueError(f"count: {count} codes do not fit in {words.shape[1]} words")
    if layout == "dense":
        codes = unpack_rows(words, bits, count)
    else:
        codes = np.array([[c for w in r for c in words_to_row([w], bits, per)][:count] for r in words],
                         dtype=np.int64).reshape(words.shape[0], count)
    out = (codes - 2 ** (bits - 1)).astype(np.int8)
    return np.ascontiguousarray(out.T if packed_dim == 0 else out)


OPS = {f"quant.pack.{fn.__name__}": fn for fn in (
    gptq_qweight, gptq_unpack_qweight, gptq_qzeros, gptq_unpack_qzeros, gptq_repair_v1, gptq_g_idx,
    gptq_dequantize, awq_pack, awq_unpack, awq_dequantize, ct_pack, ct_unpack)}
_BITS = {"bits": [2, 3, 4, 8]}
_ZEROS = {"bits": [2, 3, 4, 8], "zero_format": ["v1", "v2"]}
_GROUPS = [128, 64, 32, 16, 8, 4, 2, 1, -1]
_CT = {"bits": [1, 2, 3, 4, 5, 6, 7, 8], "packed_dim": [1, 0], "layout": ["dense", "padded"]}
VARIANTS = {
    "quant.pack.gptq_qweight": _BITS, "quant.pack.gptq_unpack_qweight": _BITS, "quant.pack.gptq_repair_v1": _BITS,
    "quant.pack.gptq_qzeros": _ZEROS, "quant.pack.gptq_unpack_qzeros": _ZEROS, "quant.pack.gptq_dequantize": _ZEROS,
    "quant.pack.gptq_g_idx": {"group": _GROUPS, "static_groups": [False, True]},
    "quant.pack.awq_dequantize": {"group": _GROUPS},
    "quant.pack.ct_pack": _CT, "quant.pack.ct_unpack": _CT,
}
