"""The packed layouts weight-only checkpoints store: GPTQ's qweight and qzeros (bits 2,
3, 4, 8; v1 zero points stored minus one, and their repair), its g_idx, AWQ's
interleaved INT4 words, and compressed-tensors' pack_to_int32.

Bit streams. Codes of b bits are laid end to end, least significant bit first:
code k of a run occupies bits k*b .. k*b + b - 1 of the stream, and the stream is cut
into 32-bit little-endian words (word j holds stream bits 32j .. 32j + 31). At b = 2,
4, 8 a word holds 32/b whole codes; at b = 3, 32 codes fill 3 words and codes 10 and
21 straddle a word boundary (AutoGPTQ's 3-bit layout). Words are int32 (the bit
pattern of the uint32).

  GPTQ   qweight [in*b/32, out]   codes [out, in] packed along the input axis
         qzeros  [G, out*b/32]    zero points [out, G] packed along the output axis
         scales  [G, out] float16; g_idx [in] int32: the group of each input channel
         v1 ("gptq"): stored zero = (zero - 1) mod 2^b; v2 ("gptq_v2"): zero as it is
  AWQ    qweight [in, out/8]      nibble i of a word holds code AWQ_ORDER[i] of its 8
         qzeros  [G, out/8]       the same order; scales [G, out] float16; b = 4 only
  compressed-tensors  weight_packed [out, ceil(in*b/32)]: signed codes + 2^(b-1) as a
         dense stream (0.19; "padded": 32 // b codes per word, earlier releases)

    w[o, i] = f32(scales[g_idx[i], o]) * (q[o, i] - zero[g_idx[i], o])   (dequantize)

References: Frantar et al., "GPTQ", arXiv:2210.17323 (AutoGPTQ/GPTQModel packing);
Lin et al., "AWQ", arXiv:2306.00978 (AutoAWQ's gemm packing); compressed-tensors
`compressors.pack_quantized.helpers.pack_to_int32`.
"""

from __future__ import annotations

import enum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import boolean, integer, member

__all__ = ["AWQ_ORDER", "GPTQ_BITS", "CtLayout", "ZeroFormat", "awq_dequantize", "awq_pack", "awq_unpack",
           "ct_pack", "ct_unpack", "gptq_dequantize", "gptq_g_idx", "gptq_qweight", "gptq_qzeros",
           "gptq_repair_v1", "gptq_unpack_qweight", "gptq_unpack_qzeros", "pack_stream", "unpack_stream"]

GPTQ_BITS = (2, 3, 4, 8)
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble i of an AWQ word holds code AWQ_ORDER[i] of its 8


class ZeroFormat(enum.Enum):
    V1 = "v1"  # stored zero point = (zero - 1) mod 2^b (AutoGPTQ, checkpoint_format "gptq")
    V2 = "v2"  # stored as it is (GPTQModel's "gptq_v2")


class CtLayout(enum.Enum):
    DENSE = "dense"  # one stream, codes straddle words (compressed-tensors 0.19)
    PADDED = "padded"  # 32 // b codes per word, the top 32 mod b bits zero (earlier releases)


def _codes(codes: ArrayLike, bits: int, name: str, ndim: int | None = None) -> NDArray[np.int64]:
    """Unsigned integer codes below 2^bits (any integer dtype), as int64."""
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integer codes, got {codes.dtype}")
    if ndim is not None and codes.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} axes, got shape {codes.shape}")
    if codes.ndim < 1:
        raise ValueError(f"{name}: expected at least one axis, got a scalar")
    if codes.size and (int(codes.min()) < 0 or int(codes.max()) >> bits):
        raise ValueError(f"{name}: {bits}-bit codes are 0..{(1 << bits) - 1}, got {int(codes.min())}.."
                         f"{int(codes.max())}")
    return codes.astype(np.int64)


def _words(words: ArrayLike, name: str, ndim: int | None = None) -> NDArray[np.int32]:
    words = np.asarray(words)
    if words.dtype != np.int32:
        raise TypeError(f"{name}: expected int32 words, got {words.dtype}")
    if (ndim is not None and words.ndim != ndim) or words.ndim < 1:
        raise ValueError(f"{name}: expected {ndim or 'at least one'} axes, got shape {words.shape}")
    return words


def pack_stream(codes: ArrayLike, *, bits: int) -> NDArray[np.int32]:
    """codes [..., n] -> int32 words [..., ceil(n * bits / 32)]: the codes as one
    least-significant-bit-first stream along the last axis, the last word's unused
    bits zero."""
    bits = integer(bits, "bits", minimum=1, maximum=8)
    codes = _codes(codes, bits, "codes")
    n = codes.shape[-1]
    nwords = -(-n * bits // 32)
    stream = ((codes[..., None] >> np.arange(bits)) & 1).reshape(*codes.shape[:-1], n * bits)  # [..., n*b]
    stream = np.concatenate([stream, np.zeros((*codes.shape[:-1], 32 * nwords - n * bits), np.int64)], axis=-1)
    words = (stream.reshape(*codes.shape[:-1], nwords, 32) << np.arange(32)).sum(axis=-1)  # [..., W]
    return words.astype(np.uint32).view(np.int32)


def unpack_stream(words: ArrayLike, *, bits: int, count: int) -> NDArray[np.int64]:
    """The first `count` codes of the stream in int32 words [..., W] -> [..., count]."""
    bits = integer(bits, "bits", minimum=1, maximum=8)
    words = _words(words, "words")
    count = integer(count, "count", minimum=0, maximum=32 * words.shape[-1] // bits)
    stream = (words.view(np.uint32).astype(np.int64)[..., None] >> np.arange(32)) & 1  # [..., W, 32]
    stream = stream.reshape(*words.shape[:-1], 32 * words.shape[-1])[..., :count * bits]
    return (stream.reshape(*words.shape[:-1], count, bits) << np.arange(bits)).sum(axis=-1)


def _whole_words(n: int, bits: int, name: str) -> None:
    if (n * bits) % 32:
        raise ValueError(f"{name}: {n} codes of {bits} bits do not fill whole int32 words "
                         f"(GPTQ packs {32 // np.gcd(32, bits)} at a time)")


def gptq_qweight(codes: ArrayLike, *, bits: int = 4) -> NDArray[np.int32]:
    """codes [out, in] -> qweight [in * bits / 32, out]: each column of the transposed
    codes (one output channel) a stream along the input axis."""
    bits = integer(bits, "bits", choices=GPTQ_BITS)
    codes = _codes(codes, bits, "codes", ndim=2)
    _whole_words(codes.shape[1], bits, "codes")
    return np.ascontiguousarray(pack_stream(codes, bits=bits).T)


def gptq_unpack_qweight(qweight: ArrayLike, *, bits: int = 4) -> NDArray[np.int64]:
    """qweight [in * bits / 32, out] -> codes [out, in]."""
    bits = integer(bits, "bits", choices=GPTQ_BITS)
    qweight = _words(qweight, "qweight", ndim=2)
    return unpack_stream(np.ascontiguousarray(qweight.T), bits=bits, count=32 * qweight.shape[0] // bits)


def gptq_qzeros(zeros: ArrayLike, *, bits: int = 4, zero_format: ZeroFormat | str = ZeroFormat.V1
                ) -> NDArray[np.int32]:
    """zero points [out, G] (integers) -> qzeros [G, out * bits / 32]; v1 stores
    (zero - 1) mod 2^bits (a zero point of 0 wraps to 2^bits - 1)."""
    bits = integer(bits, "bits", choices=GPTQ_BITS)
    zero_format = member(zero_format, ZeroFormat, "zero_format")
    zeros = _codes(zeros, bits, "zeros", ndim=2)
    _whole_words(zeros.shape[0], bits, "zeros")
    if zero_format is ZeroFormat.V1:
        zeros = (zeros - 1) % (1 << bits)
    return pack_stream(np.ascontiguousarray(zeros.T), bits=bits)


def gptq_unpack_qzeros(qzeros: ArrayLike, *, bits: int = 4, zero_format: ZeroFormat | str = ZeroFormat.V1
                       ) -> NDArray[np.int64]:
    """qzeros [G, out * bits / 32] -> zero points [out, G] (v1: the one added back,
    modulo 2^bits, field by field)."""
    bits = integer(bits, "bits", choices=GPTQ_BITS)
    zero_format = member(zero_format, ZeroFormat, "zero_format")
    qzeros = _words(qzeros, "qzeros", ndim=2)
    stored = unpack_stream(qzeros, bits=bits, count=32 * qzeros.shape[1] // bits)  # [G, out]
    if zero_format is ZeroFormat.V1:
        stored = (stored + 1) % (1 << bits)
    return np.ascontiguousarray(stored.T)


def gptq_repair_v1(qzeros: ArrayLike, *, bits: int = 4) -> NDArray[np.int32]:
    """v1 qzeros -> v2 qzeros: one added to every field modulo 2^bits, so no carry
    crosses into the next field (GPTQModel adds 0x11111111-style constants to whole
    words, which carries out of a field holding 2^bits - 1: a v1 zero point of 0)."""
    bits = integer(bits, "bits", choices=GPTQ_BITS)
    zeros = gptq_unpack_qzeros(qzeros, bits=bits, zero_format=ZeroFormat.V1)
    return gptq_qzeros(zeros, bits=bits, zero_format=ZeroFormat.V2)


def gptq_g_idx(perm: ArrayLike, *, group: int = 128, static_groups: bool = False) -> NDArray[np.int32]:
    """The group of each input channel, g_idx [in] int32, from `perm` [in], the order in
    which the columns were quantized (the identity without act-order):
    static groups (or no act-order): g_idx[i] = i // group;
    act-order without static groups: g_idx[perm[j]] = j // group (the group a column
    fell in, counted in quantization order, written at its original position).
    group -1: one group, all zeros."""
    group = integer(group, "group", minimum=-1)
    static_groups = boolean(static_groups, "static_groups")
    perm = np.asarray(perm)
    if perm.dtype.kind not in "iu" or perm.ndim != 1:
        raise TypeError(f"perm: expected a 1-d integer permutation, got {perm.dtype} {perm.shape}")
    n = perm.size
    if not np.array_equal(np.sort(perm), np.arange(n)):
        raise ValueError(f"perm: expected a permutation of 0..{n - 1}")
    if group == 0:
        raise ValueError("group: expected a positive group size or -1")
    size = n if group == -1 else group
    if size and n % size:
        raise ValueError(f"group: {group} does not divide the input dimension {n}")
    j = np.arange(n)
    g_idx = np.empty(n, np.int64)
    if static_groups:
        g_idx[:] = j // size if size else 0
    else:
        g_idx[perm] = j // size if size else 0
    return g_idx.astype(np.int32)


def _scales(scales: ArrayLike, shape: tuple[int, ...]) -> NDArray[np.float32]:
    scales = np.asarray(scales)
    if scales.dtype not in (np.float16, np.float32):
        raise TypeError(f"scales: expected float16 or float32, got {scales.dtype}")
    if scales.shape != shape:
        raise ValueError(f"scales: expected shape {shape}, got {scales.shape}")
    return scales.astype(np.float32)


def gptq_dequantize(qweight: ArrayLike, qzeros: ArrayLike, scales: ArrayLike, g_idx: ArrayLike, *, bits: int = 4,
                    zero_format: ZeroFormat | str = ZeroFormat.V1) -> NDArray[np.float32]:
    """A GPTQ checkpoint's weights [out, in] float32: f32(scale) * (q - zero), the
    group of input channel i read from g_idx[i]."""
    codes = gptq_unpack_qweight(qweight, bits=bits)  # [out, in]
    zeros = gptq_unpack_qzeros(qzeros, bits=bits, zero_format=zero_format)  # [out, G]
    g_idx = np.asarray(g_idx)
    if g_idx.dtype.kind not in "iu" or g_idx.shape != (codes.shape[1],):
        raise ValueError(f"g_idx: expected integers of shape ({codes.shape[1]},), got {g_idx.dtype} {g_idx.shape}")
    if zeros.shape[0] != codes.shape[0]:
        raise ValueError(f"qzeros: {zeros.shape[0]} output channels, qweight has {codes.shape[0]}")
    if g_idx.size and (g_idx.min() < 0 or g_idx.max() >= zeros.shape[1]):
        raise ValueError(f"g_idx: groups are 0..{zeros.shape[1] - 1}, got {g_idx.min()}..{g_idx.max()}")
    s = _scales(scales, (zeros.shape[1], zeros.shape[0]))  # [G, out]
    return (s[g_idx].T * (codes - zeros[:, g_idx]).astype(np.float32)).astype(np.float32)


def awq_pack(codes: ArrayLike) -> NDArray[np.int32]:
    """INT4 codes [out, n] -> words [n, out / 8] (qweight from codes [out, in], qzeros
    from zero points [out, G]): packed along the output axis, nibble i of each word
    holding code AWQ_ORDER[i] of its eight."""
    codes = _codes(codes, 4, "codes", ndim=2)
    if codes.shape[0] % 8:
        raise ValueError(f"codes: {codes.shape[0]} output channels are not a multiple of 8")
    eights = codes.T.reshape(codes.shape[1], codes.shape[0] // 8, 8)[..., list(AWQ_ORDER)]  # [n, out/8, 8]
    return pack_stream(eights.reshape(codes.shape[1], codes.shape[0]), bits=4)


def awq_unpack(words: ArrayLike) -> NDArray[np.int64]:
    """words [n, out / 8] -> INT4 codes [out, n]."""
    words = _words(words, "words", ndim=2)
    nibbles = unpack_stream(words, bits=4, count=8 * words.shape[1]).reshape(words.shape[0], words.shape[1], 8)
    return np.ascontiguousarray(nibbles[..., list(np.argsort(AWQ_ORDER))].reshape(words.shape[0], -1).T)


def awq_dequantize(qweight: ArrayLike, qzeros: ArrayLike, scales: ArrayLike, *, group: int = 128
                   ) -> NDArray[np.float32]:
    """An AWQ checkpoint's weights [out, in] float32: f32(scale) * (q - zero) with
    groups of `group` consecutive input channels (-1: one)."""
    group = integer(group, "group", minimum=-1)
    codes, zeros = awq_unpack(qweight), awq_unpack(qzeros)  # [out, in], [out, G]
    if zeros.shape[0] != codes.shape[0]:
        raise ValueError(f"qzeros: {zeros.shape[0]} output channels, qweight has {codes.shape[0]}")
    size = codes.shape[1] if group == -1 else group
    if group == 0 or (size and codes.shape[1] % size) or (size and codes.shape[1] // size != zeros.shape[1]):
        raise ValueError(f"group: {group} does not give the {zeros.shape[1]} groups of qzeros over "
                         f"{codes.shape[1]} input channels")
    g = np.arange(codes.shape[1]) // size if size else np.zeros(0, np.int64)
    s = _scales(scales, (zeros.shape[1], zeros.shape[0]))
    return (s[g].T * (codes - zeros[:, g]).astype(np.float32)).astype(np.float32)


def ct_pack(value: ArrayLike, *, bits: int = 4, packed_dim: int = 1, layout: CtLayout | str = CtLayout.DENSE
            ) -> NDArray[np.int32]:
    """compressed-tensors' pack_to_int32: signed int8 codes [rows, cols] (in
    -2^(b-1) .. 2^(b-1) - 1) offset by 2^(b-1), packed along `packed_dim`."""
    bits = integer(bits, "bits", minimum=1, maximum=8)
    packed_dim = integer(packed_dim, "packed_dim", choices=(0, 1))
    layout = member(layout, CtLayout, "layout")
    value = np.asarray(value)
    if value.dtype != np.int8:
        raise TypeError(f"value: expected int8 codes, got {value.dtype}")
    half = 1 << (bits - 1)
    codes = _codes(value.astype(np.int64) + half, bits, "value", ndim=2)
    if packed_dim == 0:
        codes = codes.T
    if layout is CtLayout.DENSE:
        words = pack_stream(codes, bits=bits)
    else:
        per = 32 // bits
        n = -(-codes.shape[1] // per) * per
        padded = np.concatenate([codes, np.zeros((codes.shape[0], n - codes.shape[1]), np.int64)], axis=1)
        words = (padded.reshape(codes.shape[0], n // per, per) << (bits * np.arange(per))).sum(axis=-1)
        words = words.astype(np.uint32).view(np.int32)
    return np.ascontiguousarray(words.T if packed_dim == 0 else words)


def ct_unpack(packed: ArrayLike, *, bits: int = 4, count: int, packed_dim: int = 1,
              layout: CtLayout | str = CtLayout.DENSE) -> NDArray[np.int8]:
    """The inverse of `ct_pack`: `count` codes along `packed_dim`, as signed int8."""
    bits = integer(bits, "bits", minimum=1, maximum=8)
    packed_dim = integer(packed_dim, "packed_dim", choices=(0, 1))
    layout = member(layout, CtLayout, "layout")
    words = _words(packed, "packed", ndim=2)
    if packed_dim == 0:
        words = np.ascontiguousarray(words.T)
    per = 32 // bits
    capacity = 32 * words.shape[1] // bits if layout is CtLayout.DENSE else per * words.shape[1]
    count = integer(count, "count", minimum=0, maximum=capacity)
    if layout is CtLayout.DENSE:
        codes = unpack_stream(words, bits=bits, count=count)
    else:
        fields = (words.view(np.uint32).astype(np.int64)[..., None] >> (bits * np.arange(per))) & ((1 << bits) - 1)
        codes = fields.reshape(words.shape[0], -1)[:, :count]
    out = (codes - (1 << (bits - 1))).astype(np.int8)
    return np.ascontiguousarray(out.T if packed_dim == 0 else out)
