"""Wrong kernels whose arithmetic is right but whose handling of arrays is not: the
bugs of the first adversarial round (launch grids, strides, shapes, dtypes, in-place
writes) plus the arithmetic ones it found (log2 scales, NaN payload tricks, float16
and float64 paths of stochastic rounding, truncated random bits)."""

from __future__ import annotations

import numpy as np

from ref.conformance.catalog import discover
from ref.conformance.implementation import Implementation
from ref.formats import FORMATS, decode, encode, encode_stochastic, pack_fp4, unpack_fp4
from ref.formats.intgroup import unpack_int32


def _impl(name, ops, variants=None):
    catalog = discover()
    declared = {n: catalog[n].variant_values for n in ops if catalog[n].variants} if variants is None else variants
    return Implementation(name, ops, variants=declared)


def grid_capped_encode(x, **params):
    """One element per thread, grid capped at 65535 blocks of 256, no stride loop."""
    flat = np.asarray(x).reshape(-1)
    out = np.zeros(flat.size, np.uint8)
    n = min(flat.size, 65535 * 256)
    out[:n] = encode(flat[:n], "float8_e4m3fn", **params)
    return out.reshape(np.shape(x))


def tail_default_encode(x, **params):
    """Launches of at most 65535 x 256 elements; only the first gets the caller's options."""
    flat = np.asarray(x).reshape(-1)
    n = 65535 * 256
    head = encode(flat[:n], "float8_e4m3fn", **params)
    tail = encode(flat[n:], "float8_e4m3fn")
    return np.concatenate([head, tail]).reshape(np.shape(x))


def raw_memory_encode(x, **params):
    """Walks memory order (like data_ptr()), writes C order: wrong for F/strided inputs."""
    x = np.asarray(x)
    return encode(x.ravel(order="K"), "float8_e5m2", **params).reshape(x.shape)


def in_place_clip_encode(x, **params):
    """Clamps its input in place before converting, to save a temporary."""
    if params.get("overflow") == "saturate" and x.dtype.kind == "f":
        np.clip(x, -448.0, 448.0, out=x)
    return encode(x, "float8_e4m3fn", **params)


def empty_crashing_decode(codes):
    if int(np.asarray(codes).max()) >> 4:  # reduction over no elements raises
        raise ValueError("dirty bits")
    return decode(codes, "float4_e2m1fn")


def scalar_widening_encode(x, **params):
    x = np.atleast_1d(x)  # the kernel wants a pointer and a length
    return encode(x, "float8_e4m3fn", **params)


def int32_codes_encode(x, **params):
    return encode(x, "float8_e4m3fn", **params).astype(np.int32)


def log2_e8m0_encode(x, rounding="nearest_even", **params):
    """Directed E8M0 scales from float64 log2: a float64 just past a power of two
    loses its step, because log2 rounds."""
    if rounding not in ("toward_positive", "toward_zero", "toward_negative") or params.get("negative") != "nan":
        return encode(x, "float8_e8m0fnu", rounding=rounding, **params)
    with np.errstate(all="ignore"):
        a = np.asarray(x).astype(np.float64)
        e = np.log2(np.where(a > 0, a, 1.0))
    e = np.ceil(e) if rounding == "toward_positive" else np.floor(e)
    good = np.isfinite(a) & (a > 0) & (e + 127 >= 0) & (e + 127 <= 254)
    ref = encode(x, "float8_e8m0fnu", rounding=rounding, **params)
    return np.where(good, np.clip(e + 127, 0, 254), ref).astype(np.uint8)


def bf16_add_trick_encode(x, rounding="nearest_even", **params):
    """float32 -> bfloat16 by bits += 0x7FFF + lsb, without the NaN guard."""
    x = np.asarray(x)
    if x.dtype != np.float32 or rounding != "nearest_even" or params.get("overflow") != "nonsaturating":
        return encode(x, "bfloat16", rounding=rounding, **params)
    b = x.view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFFFFFF
    return (b >> 16).astype(np.uint16)


def f16_flattening_encode(x, **params):
    out = encode(x, "float8_e4m3fn", **params)
    return out.reshape(-1) if np.asarray(x).dtype == np.float16 else out


def sr_float64_narrowing_encode(x, rbits, **params):
    """The stochastic path only takes float32: float64 is narrowed first."""
    if np.asarray(x).dtype == np.float64:
        x = np.asarray(x).astype(np.float32)
    return encode_stochastic(x, "float8_e5m2", rbits, **params)


def sr_top16_encode(x, rbits, **params):
    """A 16-bit hardware random number: the low 16 bits of rbits are dropped."""
    if np.asarray(rbits).dtype == np.uint32:
        rbits = rbits & np.uint32(0xFFFF0000)
    return encode_stochastic(x, "float8_e4m3fn", rbits, **params)


def rbits_casting_encode(x, rbits, **params):
    """Casts whatever rbits it gets: torch.rand floats become zeros (truncation)."""
    return encode_stochastic(x, "float8_e4m3fn", np.asarray(rbits).astype(np.uint32), **params)


def row_pitch_encode(x, **params):
    """Follows the last axis' stride but assumes rows are packed back to back."""
    x = np.asarray(x)
    if x.ndim >= 2 and not x.flags.c_contiguous and not x.flags.f_contiguous:
        step = x.strides[-1] // x.itemsize
        base = np.lib.stride_tricks.as_strided(x, shape=(x.size,), strides=(x.strides[-1],))
        x = base[: x.size].reshape(x.shape) if step == 1 else x
    return encode(x, "float8_e4m3fn", **params)


_WORKSPACE = np.zeros(1 << 16, np.uint8)


def workspace_encode(x, **params):
    """Writes into one module-level buffer and returns a view: the next call overwrites it."""
    out = encode(x, "float8_e4m3fn", **params)
    view = _WORKSPACE[: out.size].reshape(out.shape)
    view[...] = out
    return view


def scratch_input_encode(x, **params):
    """Clears the sign bits of x in place as scratch, restores them afterwards."""
    bits = np.asarray(x).view(np.uint32) if np.asarray(x).dtype == np.float32 else None
    if bits is not None:
        signs = bits & np.uint32(0x80000000)
        bits &= np.uint32(0x7FFFFFFF)
        bits |= signs
    return encode(x, "float8_e4m3fn", **params)


def narrowing_pack(codes, order="low_first"):
    """Casts to uint8 before validating: 257 becomes 1."""
    return pack_fp4(np.asarray(codes).astype(np.uint8), order=order)


def nan_policy_by_dtype_encode(x, **params):
    """No NaN policy declared; float32 NaN gives +max (PTX), other dtypes give +0."""
    nan = "max" if np.asarray(x).dtype == np.float32 else "zero"
    return encode(x, "float4_e2m1fn", **{**params, "nan": nan})


def pack_without_size_check(codes, order="low_first"):
    if int(np.asarray(codes).max()) > 15:  # crashes on an empty batch
        raise ValueError("code above 15")
    return pack_fp4(codes, order=order)


def sr_top8_encode(x, rbits, **params):
    """Declares the 13-bit random number of PTX cvt.rs for f16 but reads only the top 8 bits."""
    if np.asarray(rbits).dtype == np.uint32:
        rbits = rbits & np.uint32(0xFF000000)
    return encode_stochastic(x, "float16", rbits, **params)


def sr_all_bits_encode(x, rbits, sr_bits=32, **params):
    """Declares the 8-bit random number of E2M1 but feeds all 32 bits to the adder."""
    return encode_stochastic(x, "float4_e2m1fn", rbits, **params)


def masking_fp4_decode(codes):
    """Reads the low nibble of each byte, as a LUT indexed by codes & 0xF does."""
    codes = np.asarray(codes)
    return decode(codes & np.uint8(0xF) if codes.dtype == np.uint8 else codes, "float4_e2m1fn")


def next_bit_fp6_decode(codes):
    """Checks only bit 6 for dirt: bit 7 (a stray sign) is masked away."""
    codes = np.asarray(codes)
    if codes.dtype == np.uint8:
        if (codes & 0x40).any():
            raise ValueError("codes: bit 6 set")
        codes = codes & np.uint8(0x3F)
    return decode(codes, "float6_e3m2fn")


def sign_checking_unpack(packed, order="low_first"):
    """Treats a packed byte's top bit as dirt (a signed char kernel)."""
    if (np.asarray(packed).astype(np.int64) & 0x80).any():
        raise ValueError("packed: negative byte")
    return unpack_fp4(packed, order=order)


def sign_checking_unpack_int32(words, order="gptq"):
    """Refuses negative words: the top nibble's high bit is data, not a sign."""
    if (np.asarray(words).astype(np.int64) < 0).any():
        raise ValueError("words: negative")
    return unpack_int32(words, order=order)


def rows_encode(x, **params):
    """A kernel over [rows, cols]: its output keeps the 2-D view it computed in."""
    x = np.asarray(x)
    if x.ndim > 2:
        x = x.reshape(-1, x.shape[-1])
    return encode(x, "float8_e4m3fn", **params)


def converting_encode(x, **params):
    """Converts any input to float32 first, so integers and booleans encode as numbers."""
    x = np.asarray(x)
    return encode(x if x.dtype.kind == "f" else x.astype(np.float32), "float8_e5m2", **params)


def reinterpreting_decode(codes):
    """Views any one-byte codes as uint8: int8 -1 becomes code 0xFF."""
    codes = np.asarray(codes)
    return decode(codes.view(np.uint8) if codes.dtype == np.int8 else codes, "float8_e4m3fn")


_E4 = "formats.float8_e4m3fn.encode"
_SR4 = "formats.float8_e4m3fn.encode_stochastic"

# name -> (implementation, the flag of a vector that must catch it, or None for runner checks)
KERNEL_BUGS = {
    "launch grid capped at 65535 x 256": (_impl("grid cap", {_E4: grid_capped_encode}), "large"),
    "tail launches get the default options": (_impl("tail defaults", {_E4: tail_default_encode}), "large"),
    "rows assumed packed back to back": (_impl("row pitch", {_E4: row_pitch_encode}), "layout"),
    "results returned in a shared workspace": (_impl("workspace", {_E4: workspace_encode}), "shared"),
    "input used as scratch and restored": (_impl("scratch", {_E4: scratch_input_encode}), "layout"),
    "pack narrows its input before validating": (
        _impl("narrowing pack", {"formats.float4_e2m1fn.pack": narrowing_pack}), "InvalidInput"),
    "a different NaN policy per input dtype": (
        Implementation("nan by dtype", {"formats.float4_e2m1fn.encode": nan_policy_by_dtype_encode}), "latitude"),
    "raw-memory walk ignores strides": (_impl("raw memory", {"formats.float8_e5m2.encode": raw_memory_encode}),
                                         "layout"),
    "input clipped in place": (_impl("in place", {_E4: in_place_clip_encode}), "in place"),
    "empty input crashes the decoder": (_impl("empty", {"formats.float4_e2m1fn.decode": empty_crashing_decode}),
                                        "EmptyInput"),
    "empty input crashes pack": (_impl("empty pack", {"formats.float4_e2m1fn.pack": pack_without_size_check}),
                                 "EmptyInput"),
    "0-d input comes back 1-d": (_impl("scalar", {_E4: scalar_widening_encode}), "EmptyInput"),
    "codes returned as int32": (_impl("int32", {_E4: int32_codes_encode}), "dtype"),
    "E8M0 directed scales from float64 log2": (
        _impl("log2", {"formats.float8_e8m0fnu.encode": log2_e8m0_encode}), "DirectedRounding"),
    "bfloat16 add-0x7FFF trick without a NaN guard": (
        _impl("bf16 trick", {"formats.bfloat16.encode": bf16_add_trick_encode}), "NanPayload"),
    "float16 inputs come back flattened": (_impl("f16 flat", {_E4: f16_flattening_encode}), "Float16Input"),
    "stochastic rounding narrows float64 to float32": (
        _impl("sr f64", {"formats.float8_e5m2.encode_stochastic": sr_float64_narrowing_encode}), "SrBoundary"),
    "stochastic rounding reads 16 random bits, declares 32": (_impl("sr top16", {_SR4: sr_top16_encode}),
                                                              "SrBoundary"),
    "float rbits cast instead of rejected": (_impl("rbits cast", {_SR4: rbits_casting_encode}), "InvalidInput"),
    "stochastic rounding reads 8 random bits, declares 13": (
        _impl("sr top8 as 13", {"formats.float16.encode_stochastic": sr_top8_encode},
              {"formats.float16.encode_stochastic": {"sr_bits": [13]}}), "SrBoundary"),
    "stochastic rounding reads 32 random bits, declares 8": (
        _impl("sr all bits as 8", {"formats.float4_e2m1fn.encode_stochastic": sr_all_bits_encode},
              {"formats.float4_e2m1fn.encode_stochastic": {"sr_bits": [8]}}), "SrBoundary"),
    "FP4 decoder masks bits above the code": (
        _impl("mask", {"formats.float4_e2m1fn.decode": masking_fp4_decode}), "DirtyBits"),
    "FP6 decoder checks only the next bit": (
        _impl("bit 6", {"formats.float6_e3m2fn.decode": next_bit_fp6_decode}), "DirtyBits"),
    "FP4 unpack refuses bytes with the top bit set": (
        _impl("signed unpack", {"formats.float4_e2m1fn.unpack": sign_checking_unpack}), "DirtyBits"),
    "int32 unpack refuses negative words": (
        _impl("signed words", {"formats.int4.unpack_int32": sign_checking_unpack_int32}), "DirtyBits"),
    "3-d input comes back as a matrix": (_impl("rows", {_E4: rows_encode}), "InputRank"),
    "integer input converted instead of rejected": (
        _impl("converting", {"formats.float8_e5m2.encode": converting_encode}), "InvalidInput"),
    "int8 codes reinterpreted as uint8": (
        _impl("int8 view", {"formats.float8_e4m3fn.decode": reinterpreting_decode}), "InvalidInput"),
}

# Their correct counterparts pass: a 16-bit random number declared as such.
SR_TOP16_DECLARED = _impl("sr top16, declared", {_SR4: sr_top16_encode}, {_SR4: {"sr_bits": [16]}})
FORMAT_NAMES = tuple(FORMATS)
