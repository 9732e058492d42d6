"""The round-to-nearest and packing bug corpus: wrong kernels written the way
quantizers and checkpoint packers go wrong, each one step changed from the default
run's (ref.conformance.adapters.numpy_quant_codecs and numpy_quant_packing).

RTN_BUGS, PACK_BUGS: name -> (op, flag, kernel). `bug(name)` is the Implementation
of that one op.
"""

from __future__ import annotations

import numpy as np

from corpus import patched
from ref.conformance.adapters import numpy_quant_codecs as K
from ref.conformance.adapters import numpy_quant_packing as KP
from ref.conformance.implementation import Implementation

Q, DQ = "quant.rtn.quantize", "quant.rtn.dequantize"


def _scale_zero_then(change):
    """scale_zero with its outputs changed for the asymmetric scheme: (lo, scale, zero) -> zero."""
    def replacement(original):
        def scale_zero(lo, hi, bits, scheme, floor):
            scale, zero = original(lo, hi, bits, scheme, floor)
            if scheme == "asymmetric":
                zero = change(lo, scale, zero, bits).astype(lo.dtype)
            return scale, zero
        return scale_zero
    return replacement


def _zero_plus_one(lo, scale, zero, bits):
    return np.minimum(zero + 1, 2**bits - 1)


def _zero_truncated(lo, scale, zero, bits):
    return np.minimum(np.maximum(np.trunc(-lo / scale), 0), 2**bits - 1) + 0


def _zero_half_away(lo, scale, zero, bits):
    x = -lo / scale
    return np.minimum(np.maximum(np.sign(x) * np.floor(np.abs(x) + 0.5), 0), 2**bits - 1) + 0


def _range_forced(include):
    def replacement(original):
        return lambda r, include_zero: original(r, include)
    return replacement


def _half_away_codes(original):
    def codes(r, scale, zero, bits):
        x = r / scale[:, None]
        q = np.sign(x) * np.floor(np.abs(x) + 0.5) + zero[:, None]
        return np.clip(q, 0, 2**bits - 1).astype(np.int64)
    return codes


def _output_axis_groups(w, **kw):
    """Groups of g consecutive OUTPUT channels (the weight read transposed)."""
    w = np.asarray(w)
    if w.ndim != 2 or kw.get("group", 128) in (-1,):
        return K.quantize(w, **kw)
    c, s, z = K.quantize(np.ascontiguousarray(w.T), **kw)
    n = w.shape[1] // kw.get("group", 128) if w.shape[1] % kw.get("group", 128) == 0 else s.shape[0]
    return c.T.copy(), s.reshape(-1)[: w.shape[0] * n].reshape(w.shape[0], n), \
        z.reshape(-1)[: w.shape[0] * n].reshape(w.shape[0], n)


def _symmetric_as(other):
    def replacement(original):
        def scale_zero(lo, hi, bits, scheme, floor):
            return original(lo, hi, bits, other if scheme == "symmetric" else scheme, floor)
        return scale_zero
    return replacement


def _gptq_symmetric_ct_scale(original):
    """GPTQ's symmetric lo = -amax applied to every group, also a non-negative one."""
    def adjust(lo, hi, scheme, include_zero=True):
        if scheme == "symmetric":
            hi = np.maximum(-lo, hi)
            lo = -hi
        return original(lo, hi, "asymmetric" if scheme == "symmetric" else scheme, include_zero)
    return adjust


def _restricted_power_of_two(original):
    def scale_zero(lo, hi, bits, scheme, floor):
        scale, zero = original(lo, hi, bits, scheme, floor)
        if scheme == "symmetric_restricted":
            amax = np.maximum(np.abs(lo), np.abs(hi))
            scale = np.where(amax == 0, scale, amax / lo.dtype.type(2 ** (bits - 1))).astype(lo.dtype)
        return scale, zero
    return scale_zero


def _no_dead_fix(original):
    def adjust(lo, hi, scheme, include_zero=True):
        if scheme == "symmetric":
            hi = np.maximum(-lo, hi)
            lo = np.where(lo < 0, -hi, lo)
        return lo, hi
    return adjust


def _no_floor(original):
    def scale_zero(lo, hi, bits, scheme, floor):
        with np.errstate(all="ignore"):
            if scheme in ("asymmetric", "symmetric"):
                scale = ((hi - lo) / lo.dtype.type(2**bits - 1)).astype(lo.dtype)
            else:
                return original(lo, hi, bits, scheme, floor)
            _, zero = original(lo, hi, bits, scheme, floor)
            if scheme == "asymmetric":
                zero = np.clip(np.nan_to_num(-np.rint(lo / scale)), 0, 2**bits - 1) + lo.dtype.type(0)
        return scale, zero.astype(lo.dtype)
    return scale_zero


def _float64_arithmetic(w, **kw):
    w = np.asarray(w)
    if w.dtype != np.float32:
        return K.quantize(w, **kw)
    c, s, z = K.quantize(w.astype(np.float64), **kw)
    return c, s.astype(np.float32), z.astype(np.float32)


def _mse_with(norm=2.4, first=0, strict=True):
    def mse_search(r, lo, hi, bits, scheme, floor):
        t = r.dtype.type
        best = np.full(r.shape[0], np.inf)
        scale, zero = K.scale_zero(lo, hi, bits, scheme, floor)
        for i in range(first, 80):
            p = t(1 - i / 100)
            s, z = K.scale_zero(p * lo, p * hi, bits, scheme, floor)
            err = np.sum(np.abs(K.fake(r, s, z, bits).astype(np.float64) - r) ** norm, axis=1)
            won = err < best if strict else err <= best
            best[won] = err[won]
            scale[won], zero[won] = s[won], z[won]
        return scale, zero
    return lambda original: mse_search


def _zero_after_rounding(original):
    def codes(r, scale, zero, bits, signed_zero=False):
        return original(r, scale, zero, bits, False)
    return codes


def _dequantize_scaled_zero(codes, scales, zeros, *, group=128):
    """scale * q - zero: the zero point subtracted after scaling."""
    ones = np.zeros_like(np.asarray(zeros))
    out = K.dequantize(codes, scales, ones, group=group)
    z = np.asarray(zeros).astype(out.dtype)
    r = K.rows(out, group)
    return (r - z.reshape(-1)[:, None]).astype(out.dtype).reshape(out.shape) if r.size else out


def _zero_to_eps_as_tiny(original):
    """scale_floor zero_to_eps replaces a zero scale by the smallest normal, not epsilon."""
    return lambda lo, hi, bits, scheme, floor: original(lo, hi, bits, scheme,
                                                      "tiny" if floor == "zero_to_eps" else floor)


def _negative_zero(lo, scale, zero, bits):
    """-lo / scale for lo = 0 is -0.0; a kernel that keeps its sign stores zero point -0.0."""
    return np.where(zero == 0, -0.0, zero)


def _any_bits(w, *, bits=4, group=128, scheme="asymmetric", zero_range="include_zero", scale_floor="tiny",
              search="minmax"):
    """K.quantize with the bits check widened to 1..8 (the arithmetic works for any b)."""
    if bits in (2, 3, 4, 8) or not 1 <= bits <= 8:
        return K.quantize(w, bits=bits, group=group, scheme=scheme, zero_range=zero_range,
                          scale_floor=scale_floor, search=search)
    w = K.as_weights(w)
    r = K.rows(w, group)
    include = zero_range == "include_zero"
    lo, hi = K.adjust(*K.value_range(r, include), scheme, include)
    scale, zero = K.scale_zero(lo, hi, bits, scheme, scale_floor)
    head = w.shape[:-1] + (K.group_count(w, group),)
    return (K.codes(r, scale, zero, bits, scheme == K.CT_ASYM).reshape(w.shape), scale.reshape(head),
            zero.reshape(head))


def _dequantize_any_shape(codes, scales, zeros, *, group=128):
    """Scales and zeros of the right number of elements reshaped to fit, whatever their shape."""
    codes, scales, zeros = np.asarray(codes), np.asarray(scales), np.asarray(zeros)
    if codes.ndim and codes.shape[-1] and scales.size == zeros.size:
        head = codes.shape[:-1] + (K.group_count(codes, group),)
        if scales.size == int(np.prod(head)):
            scales, zeros = scales.reshape(head), zeros.reshape(head)
    return K.dequantize(codes, scales, zeros, group=group)


def _stale_shrinks(original):
    """The MSE shrink table built once, in the dtype of the first call, and reused."""
    table = {}

    def mse_search(r, lo, hi, bits, scheme, floor):
        t = r.dtype.type
        if "p" not in table:
            table["p"] = np.array([t(1 - i / 100) for i in range(80)], dtype=r.dtype)[:, None]
        s, z = K.scale_zero((table["p"] * lo[None, :]).astype(r.dtype), (table["p"] * hi[None, :]).astype(r.dtype),
                            bits, scheme, floor)
        signed = scheme == K.CT_ASYM
        err = np.stack([np.sum(np.abs(K.fake(r, s[i], z[i], bits, signed).astype(np.float64) - r) ** 2.4, axis=1)
                        for i in range(s.shape[0])])
        pick = np.argmin(err, axis=0) if r.shape[0] else np.zeros(0, np.int64)
        return s[pick, np.arange(r.shape[0])], z[pick, np.arange(r.shape[0])]
    return lambda original_: mse_search


RTN_BUGS = {
    "zero point off by one": (Q, "ZeroPointRounding", patched(K.quantize, K, "scale_zero",
                                                              _scale_zero_then(_zero_plus_one))),
    "zero point truncated toward zero": (Q, "ZeroPointRounding", patched(K.quantize, K, "scale_zero",
                                                                         _scale_zero_then(_zero_truncated))),
    "zero point rounded half away from zero": (Q, "ZeroPointRounding", patched(
        K.quantize, K, "scale_zero", _scale_zero_then(_zero_half_away))),
    "range never forced to include zero": (Q, "IncludeZero", patched(K.quantize, K, "value_range",
                                                                     _range_forced(False))),
    "range always forced to include zero (AWQ's minmax ignored)": (Q, "IncludeZero", patched(
        K.quantize, K, "value_range", _range_forced(True))),
    "codes rounded half away from zero": (Q, "RoundingTies", patched(K.quantize, K, "codes", _half_away_codes)),
    "groups along the output axis": (Q, "GroupAxis", _output_axis_groups),
    "GPTQ's symmetric computed as compressed-tensors'": (Q, "SymmetricConvention", patched(
        K.quantize, K, "scale_zero", _symmetric_as("symmetric_compressed_tensors"))),
    "GPTQ's symmetric: lo = -amax also for a non-negative group": (Q, "SymmetricConvention", patched(
        K.quantize, K, "adjust", _gptq_symmetric_ct_scale)),
    "restricted symmetric divides amax by 2^(b-1)": (Q, "SymmetricConvention", patched(
        K.quantize, K, "scale_zero", _restricted_power_of_two)),
    "all-zero group left at range 0": (Q, "AllZeroGroup", patched(K.quantize, K, "adjust", _no_dead_fix)),
    "scale not floored (divides by zero)": (Q, "DegenerateScale", patched(K.quantize, K, "scale_zero", _no_floor)),
    "float32 weights quantized in float64": (Q, "ArithmeticDtype", _float64_arithmetic),
    "MSE search with norm 2": (Q, "MseSearch", patched(K.quantize, K, "mse_search", _mse_with(norm=2.0))),
    "MSE search skips the unshrunk range (i from 1)": (Q, "MseSearch", patched(K.quantize, K, "mse_search",
                                                                               _mse_with(first=1))),
    "MSE search ties keep the later shrink": (Q, "MseSearch", patched(K.quantize, K, "mse_search",
                                                                      _mse_with(strict=False))),
    "compressed-tensors' zero point added after rounding": (Q, "ZeroPointRounding", patched(
        K.quantize, K, "codes", _zero_after_rounding)),
    "dequantize subtracts the zero point after scaling": (DQ, "ZeroPointRounding", _dequantize_scaled_zero),
    # issue 14's adversary round
    "zero_to_eps replaces a zero scale by the smallest normal": (Q, "DegenerateScale", patched(
        K.quantize, K, "scale_zero", _zero_to_eps_as_tiny)),
    "zero point -0.0 for a group with lo = 0": (Q, "ZeroPointRounding", patched(
        K.quantize, K, "scale_zero", _scale_zero_then(_negative_zero))),
    "quantize accepts bits 1, 5, 6, 7": (Q, "InvalidInput", _any_bits),
    "dequantize accepts scales and zeros of the right size, any shape": (DQ, "InvalidInput", _dequantize_any_shape),
    "MSE shrink table kept from the first call's dtype": (Q, "MseSearch", patched(
        K.quantize, K, "mse_search", _stale_shrinks(None))),
}

# ------------------------------------------------------------------ packing


def _sequential(original):
    return list(range(8))


def _qweight_along_output(codes, *, bits=4):
    codes = KP.check_codes(codes, bits, "codes")
    return KP.pack_rows(np.ascontiguousarray(codes.T), bits, KP.whole(codes.shape[0], bits, "codes"))


def _straddle_cut(original):
    """Each word keeps only the bits that land in it: a code that crosses into the next
    word loses its high bits (packing word by word with shifts that overflow)."""
    def row_to_words(row, bits, nwords):
        words = original(row, bits, nwords)
        for k, c in enumerate(row):
            start = k * bits
            if start // 32 != (start + bits - 1) // 32 and (start // 32) + 1 < nwords:
                words[start // 32 + 1] &= ~((int(c) >> (32 - start % 32)) & KP.MASK32) & KP.MASK32
        return words
    return row_to_words


def _ignore_format(fn):
    def kernel(*args, zero_format="v1", **kw):
        return fn(*args, zero_format="v2", **kw)
    return kernel


def _word_add_repair(qzeros, *, bits=4):
    """GPTQModel's v1 -> v2: one constant per word with a 1 in every field (carries)."""
    q = KP.check_words(qzeros, "qzeros").view(np.uint32).astype(np.uint64)
    one = sum(1 << k for k in range(0, 32, bits)) if bits != 3 else None
    if one is None:  # the 3-bit stream: a 1 at every field start, spread over 3 words
        pattern = [sum(1 << (3 * k - 32 * j) for k in range(32) if 32 * j <= 3 * k < 32 * (j + 1)) for j in range(3)]
        add = np.array([pattern[j % 3] for j in range(q.shape[1])], np.uint64)
    else:
        add = np.uint64(one)
    return ((q + add) & np.uint64(KP.MASK32)).astype(np.uint32).view(np.int32)


def _signed_words(original):
    def words_to_row(words, bits, count):
        big = 0
        for j, w in enumerate(words):
            big += int(np.int32(np.uint32(int(w) & KP.MASK32))) << (32 * j)  # the word's sign kept
        return [(big >> (k * bits)) & ((1 << bits) - 1) if k < count - 1 else big >> (k * bits)
                for k in range(count)]
    return words_to_row


def _g_idx_forcing(static):
    def kernel(perm, *, group=128, static_groups=False):
        return KP.gptq_g_idx(perm, group=group, static_groups=static)
    return kernel


def _loader_ignores_g_idx(qweight, qzeros, scales, g_idx, *, bits=4, zero_format="v1"):
    codes = KP.gptq_unpack_qweight(qweight, bits=bits)
    zeros = KP.gptq_unpack_qzeros(qzeros, bits=bits, zero_format=zero_format)
    size = codes.shape[1] // zeros.shape[1]
    return KP.dequant(codes, zeros, scales, np.arange(codes.shape[1]) // size)


def _twos_complement(value, *, bits=4, packed_dim=1, layout="dense"):
    """Signed codes packed as their two's-complement low bits (no 2^(b-1) offset)."""
    v = np.asarray(value)
    if v.dtype != np.int8:
        return KP.ct_pack(value, bits=bits, packed_dim=packed_dim, layout=layout)
    shifted = (v.astype(np.int64) & ((1 << bits) - 1)) - (1 << (bits - 1))  # ct_pack adds 2^(b-1) back
    return KP.ct_pack(shifted.astype(np.int8), bits=bits, packed_dim=packed_dim, layout=layout)


def _always(layout):
    def kernel(value, *, bits=4, packed_dim=1, layout_=None, **kw):
        return KP.ct_pack(value, bits=bits, packed_dim=packed_dim, layout=layout)
    return kernel


def _awq_loader_group_unchecked(qweight, qzeros, scales, *, group=128):
    """AWQ's loader with groups i // group and no check that they match qzeros' count."""
    codes, zeros = KP.awq_unpack(qweight), KP.awq_unpack(qzeros)
    n = codes.shape[1]
    size = n if group == -1 else group
    if group == 0 or group < -1 or (size and n % size):
        raise ValueError(f"group: {group} does not split {n} columns")
    return KP.dequant(codes, zeros, scales, np.arange(n) // size if size else np.zeros(0, np.int64))


def _awq_unpack_transposed_square(words):
    codes = KP.awq_unpack(words)
    return np.ascontiguousarray(codes.T) if codes.shape[0] == codes.shape[1] else codes


def _g_idx_one_group_128(perm, *, group=128, static_groups=False):
    """group -1 read as GPTQ's default group size 128."""
    if group != -1:
        return KP.gptq_g_idx(perm, group=group, static_groups=static_groups)
    out = KP.gptq_g_idx(perm, group=-1, static_groups=static_groups)
    j = np.arange(len(out))
    out[j if static_groups else np.asarray(perm)] = j // 128
    return out


def _g_idx_wraps(qweight, qzeros, scales, g_idx, *, bits=4, zero_format="v1"):
    """A negative g_idx read as Python indexing does: from the last group."""
    zeros = KP.gptq_unpack_qzeros(qzeros, bits=bits, zero_format=zero_format)
    g = np.asarray(g_idx)
    if g.dtype.kind in "iu" and g.size:
        g = np.where(g < 0, g + zeros.shape[1], g).astype(g.dtype)
    return KP.gptq_dequantize(qweight, qzeros, scales, g, bits=bits, zero_format=zero_format)


def _gptq_any_bits(original):
    return lambda bits: bits


def _ct_any_bits(value, *, bits=4, packed_dim=1, layout="dense"):
    """ct_pack with no bits check: 9 or 16 bits packed as a stream, 0 bits as no words."""
    if 1 <= bits <= 8:
        return KP.ct_pack(value, bits=bits, packed_dim=packed_dim, layout=layout)
    v = np.asarray(value).astype(np.int64)
    v = v if packed_dim == 1 else v.T
    if bits < 1:
        return np.zeros((v.shape[0], 0), np.int32)
    words = KP.pack_rows(v + 2 ** (bits - 1), bits, -(-v.shape[1] * bits // 32))
    return np.ascontiguousarray(words if packed_dim == 1 else words.T)


def _g_idx_truthy(perm, *, group=128, static_groups=False):
    return KP.gptq_g_idx(perm, group=group, static_groups=bool(static_groups))


def _float64_scales_ok(loader):
    def kernel(qweight, qzeros, scales, *args, **kw):
        scales = np.asarray(scales)
        return loader(qweight, qzeros, scales.astype(np.float32) if scales.dtype == np.float64 else scales,
                      *args, **kw)
    return kernel


PK = "quant.pack."
PACK_BUGS = {
    "AWQ nibble order replaced by sequential": (PK + "awq_pack", "AwqOrder",
                                                patched(KP.awq_pack, KP, "AWQ_POSITIONS", _sequential)),
    "AWQ loader reads words in sequential order": (PK + "awq_dequantize", "AwqOrder",
                                                   patched(KP.awq_dequantize, KP, "AWQ_POSITIONS", _sequential)),
    "GPTQ qweight packed along the output axis": (PK + "gptq_qweight", "PackAxis", _qweight_along_output),
    "3-bit codes straddling a word lose their high bits": (PK + "gptq_qweight", "Straddle3Bit",
                                                           patched(KP.gptq_qweight, KP, "row_to_words", _straddle_cut)),
    "v1 zero points read as v2 (not repaired)": (PK + "gptq_unpack_qzeros", "ZeroFormatV1",
                                                 _ignore_format(KP.gptq_unpack_qzeros)),
    "v1 zero points written without the minus one": (PK + "gptq_qzeros", "ZeroFormatV1",
                                                     _ignore_format(KP.gptq_qzeros)),
    "v1 loader does not repair the zero points": (PK + "gptq_dequantize", "ZeroFormatV1",
                                                  _ignore_format(KP.gptq_dequantize)),
    "v1 repair by a whole-word add (carries out of a field)": (PK + "gptq_repair_v1", "CarryRepair", _word_add_repair),
    "unpack sign-extends the top field of a word": (PK + "gptq_unpack_qweight", "WordSign",
                                                    patched(KP.gptq_unpack_qweight, KP, "words_to_row", _signed_words)),
    "static-group g_idx computed in permuted order": (PK + "gptq_g_idx", "GIdxOrder", _g_idx_forcing(False)),
    "act-order g_idx written in quantization order": (PK + "gptq_g_idx", "GIdxOrder", _g_idx_forcing(True)),
    "loader ignores g_idx (group = i // group size)": (PK + "gptq_dequantize", "GIdxOrder", _loader_ignores_g_idx),
    "compressed-tensors codes packed as two's complement": (PK + "ct_pack", "SignedOffset", _twos_complement),
    "compressed-tensors padded words where dense is declared": (PK + "ct_pack", "CtLayout", _always("padded")),
    # issue 14's adversary round
    "AWQ loader does not check the group count against qzeros": (PK + "awq_dequantize", "InvalidInput",
                                                                 _awq_loader_group_unchecked),
    "AWQ unpack transposed for a square layer": (PK + "awq_unpack", "PackAxis", _awq_unpack_transposed_square),
    "g_idx with group -1 uses groups of 128": (PK + "gptq_g_idx", "GIdxOrder", _g_idx_one_group_128),
    "GPTQ loader reads a negative g_idx from the last group": (PK + "gptq_dequantize", "InvalidInput", _g_idx_wraps),
    "GPTQ qweight accepts bits 1, 5, 6, 7": (PK + "gptq_qweight", "InvalidInput",
                                             patched(KP.gptq_qweight, KP, "_gptq_bits", _gptq_any_bits)),
    "GPTQ qzeros accept bits 1, 5, 6, 7": (PK + "gptq_qzeros", "InvalidInput",
                                           patched(KP.gptq_qzeros, KP, "_gptq_bits", _gptq_any_bits)),
    "compressed-tensors pack accepts bits outside 1..8": (PK + "ct_pack", "InvalidInput", _ct_any_bits),
    "g_idx accepts an integer static_groups": (PK + "gptq_g_idx", "InvalidInput", _g_idx_truthy),
    "GPTQ loader accepts float64 scales": (PK + "gptq_dequantize", "InvalidInput",
                                           _float64_scales_ok(KP.gptq_dequantize)),
    "AWQ loader accepts float64 scales": (PK + "awq_dequantize", "InvalidInput",
                                          _float64_scales_ok(KP.awq_dequantize)),
}


# The entries the issue names: the corpus rule runs them in the default profile, the rest in `-m deep`.
DEFAULT_PROFILE = {"zero point off by one", "range never forced to include zero",
                   "AWQ nibble order replaced by sequential", "static-group g_idx computed in permuted order"}


def bug(name: str) -> Implementation:
    op, _, kernel = {**RTN_BUGS, **PACK_BUGS}[name]
    variants = {**K.VARIANTS, **KP.VARIANTS}
    return Implementation(f"bug: {name}", {op: kernel}, variants={op: variants[op]} if op in variants else {})
