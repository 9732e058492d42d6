"""The integer group, packing and layout bug corpus on the default run's kernels
(ref.conformance.adapters.numpy_groups): with no bugs each function here is the
product's; a bug is one step changed (the layout's 32-row interleave transposed, the
word order swapped, a ragged word padded, dirty bits masked), or, for the group
quantizer, a loop over groups with float32 scalars and the bug switched on by name."""

from __future__ import annotations

import numpy as np

from ref.conformance.adapters import numpy_groups as product
from ref.conformance.implementation import Implementation

F = np.float32
FLOOR = product.SCALE_FLOOR  # the smallest scale (compressed-tensors' clamp)


def to_blocked(scales, bugs=()):
    out = product.to_blocked(scales)
    if "transposed" in bugs:  # rows r and r + 32 swapped with the 4-row groups: [i, j, c] inside a tile
        out = out.reshape(-1, 32, 4, 4).transpose(0, 2, 1, 3).reshape(-1)
    return out


def quantize_groups(w, bits, group, scheme, bugs=(), zero_storage="exact"):
    w = np.asarray(w)
    if not bugs:
        return product.quantize_groups(w, bits=bits, group=group, scheme=scheme, zero_storage=zero_storage)
    if w.dtype not in (np.float32, np.float16) or not np.isfinite(w).all():
        raise ValueError("w: finite float32 or float16")
    w = w.astype(F)
    if w.ndim == 0 or w.shape[-1] % group:
        if "pad_ragged" not in bugs:
            raise ValueError("w: the last axis must be a multiple of the group")
        n = w.shape[-1]  # pad the last group with zeros and cut the codes back
        padded = np.concatenate([w, np.zeros((*w.shape[:-1], -n % group), F)], axis=-1)
        codes, scales, zeros = quantize_groups(padded, bits, group, scheme, zero_storage=zero_storage)
        return codes[..., :n], scales, zeros
    # reshape(-1, n) cannot infer the row count of an empty array: name it.
    rows = w.reshape(-1 if "reshape_minus_one" in bugs else int(np.prod(w.shape[:-1])), w.shape[-1])
    ng = rows.shape[1] // group
    codes = np.zeros(rows.shape, np.uint8)
    scales = np.zeros((rows.shape[0], ng), F)
    zeros = np.zeros((rows.shape[0], ng), np.uint8)
    qmax = (1 << bits) - 1
    for r in range(rows.shape[0]):
        for k in range(ng):
            g = rows[r, k * group:(k + 1) * group]
            if scheme == "asymmetric":
                lo, hi = min(F(g.min()), F(0)), max(F(g.max()), F(0))
                if lo == 0 and hi == 0:
                    lo, hi = F(-1), F(1)
                if not np.isfinite(F(hi) - F(lo)):
                    raise ValueError("w: a group's range overflows float32")
                scale = F(F(hi - lo) / F(qmax))
                if "no_floor" not in bugs:
                    scale = max(scale, FLOOR)
                z = F(-lo / scale)
                zero = min(max(np.floor(z + F(0.5)) if "zero_half_away" in bugs else np.rint(z), 0), qmax)
                if "zero_minus_one" in bugs:
                    zero = max(zero - 1, 0)
                quotient = g * F(F(1) / scale) if "reciprocal" in bugs else g / scale
                q = np.clip(np.rint(quotient) + zero, 0, qmax)
            else:
                half = 1 << (bits - 1)
                amax = F(np.abs(g).max())
                scale = F(amax / F(half - 1)) if amax > 0 else F(1)
                if "no_floor" not in bugs:
                    scale = max(scale, FLOOR)
                zero = half
                q = np.clip(np.rint(g / scale), -half, half - 1) + half
            codes[r, k * group:(k + 1) * group] = q
            if zero_storage == "gptq_v1":
                zero = (int(zero) - 1) % (qmax + 1)
            scales[r, k], zeros[r, k] = scale, zero
    out = (*w.shape[:-1], ng)
    return codes.reshape(w.shape), scales.reshape(out), zeros.reshape(out)


def dequantize_groups(codes, scales, zeros, bits, group, zero_storage="exact", bugs=()):
    """One weight at a time: w[i] = f32(scale[i // group] * (q[i] - zero[i // group]))."""
    codes, scales, zeros = np.asarray(codes), np.asarray(scales), np.asarray(zeros)
    if "mask" in bugs and codes.dtype == np.uint8 and zeros.dtype == np.uint8:
        # keep the low `bits` of each byte, as a kernel reading nibbles does
        codes, zeros = codes & np.uint8((1 << bits) - 1), zeros & np.uint8((1 << bits) - 1)
    if "ragged" not in bugs:
        return product.dequantize_groups(codes, scales, zeros, bits=bits, group=group, zero_storage=zero_storage)
    if codes.dtype != np.uint8 or zeros.dtype != np.uint8 or scales.dtype != F or codes.ndim == 0:
        raise TypeError("codes, zeros: uint8; scales: float32")
    if (codes.size and codes.max() >> bits) or (zeros.size and zeros.max() >> bits):
        raise ValueError("codes, zeros: bits above the code width")
    n = codes.shape[-1]
    if n % group and "ragged" not in bugs:
        raise ValueError("codes: the last axis must be a multiple of the group")
    if scales.shape != (*codes.shape[:-1], -(-n // group)) or zeros.shape != scales.shape:
        raise ValueError("scales, zeros: one per group")
    lead, ng = int(np.prod(codes.shape[:-1])), -(-n // group)
    rows, srows, zrows = codes.reshape(lead, n), scales.reshape(lead, ng), zeros.reshape(lead, ng)
    out = np.zeros(rows.shape, F)
    for r in range(rows.shape[0]):
        for i in range(n):
            z = int(zrows[r, i // group])
            if zero_storage == "gptq_v1":
                z = (z + 1) % (1 << bits)
            out[r, i] = F(srows[r, i // group] * F(int(rows[r, i]) - z))
    return out.reshape(codes.shape)


def pack_int32(codes, order="gptq", bugs=()):
    codes = np.asarray(codes)
    if "pad" in bugs and codes.ndim and codes.shape[-1] % 8:  # zero-fill the last word
        codes = np.concatenate([codes, np.zeros((*codes.shape[:-1], -codes.shape[-1] % 8), codes.dtype)], axis=-1)
    if "swap_order" in bugs:
        order = "gptq" if order == "awq" else "awq"
    return product.pack_int32(codes, order=order)


def _impl(name, ops, variants):
    return Implementation(name, ops, variants=variants)


def correct():
    ops = {"formats.scales.to_blocked": to_blocked, "formats.int4.pack_int32": pack_int32}
    variants = {"formats.int4.pack_int32": {"order": ["gptq", "awq"]}}
    for bits in (4, 8):
        ops[f"formats.int{bits}_group.quantize"] = (
            lambda w, scheme, group, zero_storage, b=bits: quantize_groups(w, b, group, scheme,
                                                                           zero_storage=zero_storage))
        ops[f"formats.int{bits}_group.dequantize"] = _dequantizer(bits)
        variants[f"formats.int{bits}_group.quantize"] = {"scheme": ["asymmetric", "symmetric"],
                                                         "group": [128, 64, 32],
                                                         "zero_storage": ["exact", "gptq_v1"]}
        variants[f"formats.int{bits}_group.dequantize"] = {"group": [128, 64, 32],
                                                           "zero_storage": ["exact", "gptq_v1"]}
    return _impl("loops and tile reshapes", ops, variants)


def _quantizer(bits, *bugs):
    return lambda w, scheme, group, zero_storage: quantize_groups(w, bits, group, scheme, bugs,
                                                                  zero_storage=zero_storage)


def _dequantizer(bits, *bugs):
    return lambda codes, scales, zeros, group, zero_storage: dequantize_groups(codes, scales, zeros, bits, group,
                                                                               zero_storage, bugs)


def _flattening_quantizer(w, scheme, group, zero_storage):
    """Takes the weights as one [rows, n] matrix and returns them so."""
    w = np.asarray(w)
    return quantize_groups(w.reshape(-1, w.shape[-1]) if w.ndim else w, 8, group, scheme,
                           zero_storage=zero_storage)


def _float32_only_quantizer(w, scheme, group, zero_storage):
    if np.asarray(w).dtype != F:
        raise TypeError("w: this kernel is built for float32 weights")
    return quantize_groups(w, 4, group, scheme, zero_storage=zero_storage)


_ALL_GROUPS = {"group": [128, 64, 32]}


# name -> (implementation, flag of a vector that must catch it)
GROUP_LAYOUT_BUGS = {
    "128x4 layout with the 32-row interleave transposed": (
        _impl("layout transposed", {"formats.scales.to_blocked": lambda scales: to_blocked(scales, ("transposed",))},
              {}), "LayoutTranspose"),
    "zero point off by one": (
        _impl("zero - 1", {"formats.int4_group.quantize":
                           lambda w, scheme, group, zero_storage: quantize_groups(w, 4, group, scheme,
                                                                                  ("zero_minus_one",))},
              {}), "Random"),
    "zero point rounded half away from zero": (
        _impl("zero half away", {"formats.int4_group.quantize":
                                 lambda w, scheme, group, zero_storage: quantize_groups(w, 4, group, scheme,
                                                                                        ("zero_half_away",))},
              {}), "ZeroPoint"),
    "weights multiplied by the reciprocal of the scale": (
        _impl("reciprocal", {"formats.int8_group.quantize":
                             lambda w, scheme, group, zero_storage: quantize_groups(w, 8, group, scheme,
                                                                                    ("reciprocal",))},
              {}), "TiesToEven"),
    "GPTQ v1 zero points stored without the minus one": (
        _impl("v1 exact", {"formats.int4_group.quantize":
                           lambda w, scheme, group, zero_storage: quantize_groups(w, 4, group, scheme)},
              {"formats.int4_group.quantize": {"zero_storage": ["gptq_v1"]}}), "ZeroPoint"),
    "scale not floored: a subnormal group divides by zero": (
        _impl("no floor", {"formats.int4_group.quantize": _quantizer(4, "no_floor")},
              {"formats.int4_group.quantize": {"scheme": ["asymmetric", "symmetric"]}}), "DegenerateGroup"),
    "int8 scale not floored (GPTQ's own quantizer)": (
        _impl("no floor 8", {"formats.int8_group.quantize": _quantizer(8, "no_floor")}, {}), "DegenerateGroup"),
    "a ragged last group padded with zeros": (
        _impl("pad ragged", {"formats.int8_group.quantize": _quantizer(8, "pad_ragged")},
              {"formats.int8_group.quantize": _ALL_GROUPS}), "RaggedGroup"),
    "INT4 dequantize masks bits above the code": (
        _impl("mask", {"formats.int4_group.dequantize": _dequantizer(4, "mask")}, {}), "DirtyBits"),
    "dequantize indexes groups by i // group without a length check": (
        _impl("ragged dequant", {"formats.int4_group.dequantize": _dequantizer(4, "ragged")},
              {"formats.int4_group.dequantize": _ALL_GROUPS}), "RaggedGroup"),
    "int32 packing zero-fills a ragged last word": (
        _impl("pad word", {"formats.int4.pack_int32": lambda codes, order: pack_int32(codes, order, ("pad",))}, {}),
        "RaggedGroup"),
    "group quantize returns a stack of matrices as one matrix": (
        _impl("flatten", {"formats.int8_group.quantize": _flattening_quantizer}, {}), "InputRank"),
    "group quantize built for float32 weights only": (
        _impl("float32 only", {"formats.int4_group.quantize": _float32_only_quantizer},
              {"formats.int4_group.quantize": _ALL_GROUPS}), "Float16Input"),
    "rows of no weights crash reshape(-1, n)": (
        _impl("empty", {"formats.int4_group.quantize": _quantizer(4, "reshape_minus_one")}, {}), "EmptyInput"),
    "AWQ nibble order where GPTQ's is declared": (
        _impl("word order", {"formats.int4.pack_int32": lambda codes, order: pack_int32(codes, order, ("swap_order",))},
              {}), "WordOrder"),
}
