"""HQQ, half-quadratic quantization: min-max group parameters, then the zero points
tuned by a proximal (half-quadratic) solver of the l_p error, p < 1, with the scales
held fixed (spec/quant.md#hqq).

  groups   axis 1: w.reshape(-1, G)  (G consecutive elements of the flat weight)
           axis 0: w.reshape(G, -1)  (column j of [G, numel/G]: elements j, j + numel/G, ...)
  init     s = (2^b - 1) / (max - min)   (HQQ works with the INVERSE scale: q = w * s + z)
           s = 1 where max - min <= 1e-4 (hqq 0.2.7+: flat_floor), s = min(s, 2e4);
           z = -min * s  (round_zero: z = rne(z))
  solve    for i = 0 .. iters - 1:
             q_i = clamp(rne(w * s + z_i), 0, 2^b - 1),   r_i = (q_i - z_i) / s
             e_i = mean |w - r_i|                    (over the WHOLE tensor, every group)
             w_e = shrink_p(w - r_i, beta_i)
             z_{i+1} = mean over the group of (q_i - (w - w_e) * s)
             stop (after the update) when e_i >= min(e_0 .. e_{i-1})
           the zero returned is the last one computed: z_{k+1} when the stop came at
           step k, z_iters after a full run
  shrink_p x = sign(x) * max(|x| - |x|^(p - 1) / beta, 0)   (p = 1: soft threshold 1/beta)
  output   codes = clamp(rne(w * s + z), 0, 2^b - 1); the scale STORED is 1 / s
  dequant  w' = (codes - z) * (1 / s)

beta_i is beta for every step in hqq 0.2.7 and later ("constant": kappa is read but
never applied) and beta * kappa^i in hqq 0.1.x to 0.2.6 ("kappa"). The oracle runs
in float64; hqq runs float32 on CPU and float16 on CUDA. The bit packings hqq
checkpoints store follow: rows split into 8 / b equal slices (3 bits: 10 slices in
an int32 after padding the rows to a multiple of 10), slice k shifted into the
k-th field from the top; `state_dict` writes a layer as hqq's HQQLinear stores it.
`conditioning` says how far an input is from a decision float32 could take the other
way (the catalog's vectors and examples are conditioned inputs).

Reference: Badri and Shaji, "Half-Quadratic Quantization of Large Machine Learning
Models" (Mobius Labs blog, 2023), code mobiusml/hqq (hqq/core/optimize.py,
quantize.py, bitpack.py, 0.2.8.post1); the half-quadratic splitting of Geman and
Yang (1995).
"""

from __future__ import annotations

import enum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import boolean, integer, member, real

__all__ = ["BITS", "FIELDS", "LAYOUT_OF_BITS", "BetaSchedule", "Layout", "conditioning", "dequantize", "group_view",
           "initial_params", "load_state_dict", "optimize_zero", "pack", "quantize", "shrink_lp", "state_dict",
           "unpack"]

BITS = (1, 2, 3, 4, 5, 6, 8)
SCALE_MAX = 2e4  # the inverse scale's clamp ("half-precision problems")
FLAT_RANGE = 1e-4  # a group whose max - min is at most this takes inverse scale 1


class BetaSchedule(enum.Enum):
    CONSTANT = "constant"  # hqq 0.2.7 .. 0.2.8.post1: beta_i = beta
    KAPPA = "kappa"  # hqq 0.1.x .. 0.2.6: beta_i = beta * kappa^i, multiplied after each zero update


class Layout(enum.Enum):
    U8_8 = "8bit_u8"  # one code per byte
    U8_4 = "4bit_u8"  # rows [0, R/2) in the high nibble, [R/2, R) in the low one
    I32_3 = "3bit_32"  # rows padded to 10k; slice j of k rows at bits 27 - 3j of an int32
    U8_2 = "2bit_u8"  # four slices of R/4 rows at bits 6, 4, 2, 0
    U8_1 = "1bit_u8"  # eight slices of R/8 rows at bits 7 .. 0


LAYOUT_OF_BITS = {8: Layout.U8_8, 6: Layout.U8_8, 5: Layout.U8_8, 4: Layout.U8_4, 3: Layout.I32_3,
                  2: Layout.U8_2, 1: Layout.U8_1}
FIELDS = {Layout.U8_8: (8, 1), Layout.U8_4: (4, 2), Layout.I32_3: (3, 10), Layout.U8_2: (2, 4),
           Layout.U8_1: (1, 8)}  # layout -> (bits per field, fields per word)


def shrink_lp(x: ArrayLike, *, beta: float, p: float) -> NDArray[np.float64]:
    """The generalized soft-threshold: sign(x) * max(|x| - |x|^(p-1) / beta, 0), float64;
    0 at x = 0 (the threshold |x|^(p-1) / beta is infinite there when p < 1)."""
    beta = real(beta, "beta")
    p = real(p, "p")
    if p > 1:
        raise ValueError(f"p: the l_p shrink is defined for 0 < p <= 1, got {p}")
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    with np.errstate(divide="ignore"):
        threshold = np.where(a > 0, a ** (p - 1), np.inf) / beta
    return np.sign(x) * np.maximum(a - threshold, 0.0)


def group_view(w: ArrayLike, *, group: int, axis: int) -> NDArray:
    """w (any shape, row-major) -> the grouped matrix hqq quantizes: [numel/G, G] for
    axis 1 (a group is a row), [G, numel/G] for axis 0 (a group is a column)."""
    w = np.asarray(w)
    group = integer(group, "group", minimum=1)
    axis = integer(axis, "axis", choices=(0, 1))
    if w.ndim < 1 or w.size == 0 or w.size % group:
        raise ValueError(f"group: the weight's {w.size} elements (shape {w.shape}) must be a positive "
                         f"multiple of group={group}")
    return w.reshape(-1, group) if axis == 1 else w.reshape(group, -1)


def initial_params(g: ArrayLike, *, bits: int, axis: int, round_zero: bool = False, flat_floor: bool = True):
    """Min-max parameters of the grouped matrix g: (inverse scale s, zero z), each
    float64 with the group axis kept (length 1), as hqq's Quantizer computes them
    (flat_floor False: hqq <= 0.2.6, where a range <= 1e-4 meets only the 2e4 clamp)."""
    bits = integer(bits, "bits", choices=BITS)
    axis = integer(axis, "axis", choices=(0, 1))
    g = np.asarray(g, dtype=np.float64)
    lo, hi = g.min(axis=axis, keepdims=True), g.max(axis=axis, keepdims=True)
    span = hi - lo
    with np.errstate(divide="ignore"):
        s = ((1 << bits) - 1) / span
    if boolean(flat_floor, "flat_floor"):
        s = np.where(np.abs(span) <= FLAT_RANGE, 1.0, s)
    s = np.minimum(s, SCALE_MAX)
    z = -lo * s
    return s, (np.rint(z) if boolean(round_zero, "round_zero") else z)


def _codes(g: NDArray, s: NDArray, z: NDArray, qmax: int) -> NDArray[np.float64]:
    return np.clip(np.rint(g * s + z), 0, qmax)


def _solver(g, s, z, *, bits, axis, p, beta, kappa, iters, beta_schedule):
    """The solver's steps: yields (v = g * s + z_i, q_i, w_e, z_{i+1}, e_i, stop) for each
    step run, `stop` True on the last one when the early stop ended the run."""
    bits = integer(bits, "bits", choices=BITS)
    axis = integer(axis, "axis", choices=(0, 1))
    iters = integer(iters, "iters", minimum=1)
    kappa = real(kappa, "kappa")
    schedule = member(beta_schedule, BetaSchedule, "beta_schedule")
    g, s, z = (np.asarray(a, dtype=np.float64) for a in (g, s, z))
    qmax = (1 << bits) - 1
    best = np.inf
    for i in range(iters):
        v = g * s + z
        q = np.clip(np.rint(v), 0, qmax)
        r = (q - z) / s  # the dequantized weights
        step_beta = beta * kappa ** i if schedule is BetaSchedule.KAPPA else beta
        w_e = shrink_lp(g - r, beta=step_beta, p=p)
        z_next = np.mean(q - (g - w_e) * s, axis=axis, keepdims=True)
        e = float(np.mean(np.abs(g - r)))
        stop = not e < best
        yield v, q, w_e, z_next, e, stop
        if stop:
            return
        best, z = e, z_next


def optimize_zero(g: ArrayLike, s: ArrayLike, z: ArrayLike, *, bits: int, axis: int, p: float = 0.7,
                  beta: float = 10.0, kappa: float = 1.01, iters: int = 20,
                  beta_schedule: BetaSchedule | str = BetaSchedule.CONSTANT):
    """hqq's optimize_weights_proximal_legacy on the grouped matrix g (float64):
    -> (z, errors), the zero after the last update and e_0, e_1, ... (one per step run;
    the last one is the step that stopped, unless all `iters` ran)."""
    errors = []
    for *_, z_next, e, _ in _solver(g, s, z, bits=bits, axis=axis, p=p, beta=beta, kappa=kappa, iters=iters,
                                    beta_schedule=beta_schedule):
        errors.append(e)
        z = z_next
    return np.asarray(z, dtype=np.float64), errors


def conditioning(w: ArrayLike, *, bits: int = 4, group: int = 64, axis: int = 0, optimize: bool = True,
                 round_zero: bool = False, beta_schedule: BetaSchedule | str = BetaSchedule.CONSTANT,
                 flat_floor: bool = True,
                 p: float = 0.7, beta: float = 10.0, kappa: float = 1.01, iters: int = 20) -> tuple[float, float]:
    """How far `quantize(w, ...)` is from a decision float32 arithmetic could take the other
    way: (the smallest distance, in steps, of any w * s + z at any solver step or the final
    rounding from a rounding boundary inside the code range; the smallest relative gap
    |e_i - min(e_0 .. e_{i-1})| / e_i of an early-stop test, an exact tie at a fixed point
    of the solver, where the codes and the shrink are those of the step before, counting
    as decided). Both inf when nothing is decided."""
    w = np.asarray(w, dtype=np.float64)
    g = group_view(w, group=group, axis=axis)
    qmax = (1 << integer(bits, "bits", choices=BITS)) - 1
    s, z = initial_params(g, bits=bits, axis=axis, round_zero=round_zero, flat_floor=flat_floor)

    def code_margin(v):
        inside = (v > -0.5) & (v < qmax + 0.5)  # past the ends the clamp decides
        return float(np.min(np.abs(v - np.floor(v) - 0.5), where=inside, initial=np.inf))

    margin, gap, best, last = np.inf, np.inf, np.inf, None
    if boolean(optimize, "optimize"):
        for v, q, w_e, z_next, e, _ in _solver(g, s, z, bits=bits, axis=axis, p=p, beta=beta, kappa=kappa,
                                               iters=iters, beta_schedule=beta_schedule):
            margin = min(margin, code_margin(v))
            fixed = last is not None and np.array_equal(q, last[0]) and np.array_equal(w_e, last[1])
            if best < np.inf and not (e == best and fixed):
                gap = min(gap, abs(e - best) / max(e, np.finfo(np.float64).tiny))
            best, last, z = min(best, e), (q, w_e), z_next
    return min(margin, code_margin(g * s + z)), gap


def quantize(w: ArrayLike, *, bits: int = 4, group: int = 64, axis: int = 0, optimize: bool = True,
             round_zero: bool = False, beta_schedule: BetaSchedule | str = BetaSchedule.CONSTANT,
             flat_floor: bool = True,
             p: float = 0.7, beta: float = 10.0, kappa: float = 1.01, iters: int = 20):
    """hqq's Quantizer.quantize (channel-wise, unpacked): w (float16/32/64, any shape,
    finite) -> (codes uint8 of the grouped shape, scale float64 = 1 / s, zero float64),
    scale and zero with the group axis kept: [1, numel/G] for axis 0, [numel/G, 1] for 1."""
    w = np.asarray(w)
    if w.dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(f"w: expected float16, float32 or float64 weights, got {w.dtype}")
    if not np.isfinite(w).all():
        raise ValueError("w: HQQ takes finite weights (found NaN or Inf)")
    g = group_view(w.astype(np.float64), group=group, axis=axis)  # [numel/G, G] or [G, numel/G]
    s, z = initial_params(g, bits=bits, axis=axis, round_zero=round_zero, flat_floor=flat_floor)
    if boolean(optimize, "optimize"):
        z, _ = optimize_zero(g, s, z, bits=bits, axis=axis, p=p, beta=beta, kappa=kappa, iters=iters,
                             beta_schedule=beta_schedule)
    codes = _codes(g, s, z, (1 << bits) - 1)
    return codes.astype(np.uint8), 1.0 / s, z


def dequantize(codes: ArrayLike, scale: ArrayLike, zero: ArrayLike) -> NDArray[np.float32]:
    """float32 (codes - zero) * scale, scale and zero broadcast over the group axis (hqq's
    Quantizer.dequantize at compute dtype float32, before its reshape to the weight)."""
    codes, scale, zero = np.asarray(codes), np.asarray(scale), np.asarray(zero)
    if codes.dtype != np.uint8:
        raise TypeError(f"codes: expected uint8 codes, got {codes.dtype}")
    if scale.dtype != np.float32 or zero.dtype != np.float32:
        raise TypeError(f"scale, zero: expected float32, got {scale.dtype} and {zero.dtype}")
    if codes.ndim != 2 or scale.ndim != 2 or zero.ndim != 2:
        raise ValueError(f"codes, scale, zero: expected 2-d arrays, got shapes {codes.shape}, {scale.shape}, "
                         f"{zero.shape}")
    for name, a in (("scale", scale), ("zero", zero)):
        if a.shape not in ((1, codes.shape[1]), (codes.shape[0], 1)):
            raise ValueError(f"{name}: expected shape (1, {codes.shape[1]}) or ({codes.shape[0]}, 1) for codes "
                             f"{codes.shape}, got {a.shape}")
    if scale.shape != zero.shape:
        raise ValueError(f"scale, zero: expected one shape, got {scale.shape} and {zero.shape}")
    return ((codes.astype(np.float32) - zero) * scale).astype(np.float32)


def _slices(rows: int, k: int, name: str) -> int:
    if rows % k:
        raise ValueError(f"{name}: the layout splits the rows into {k} equal slices, got {rows} rows")
    return rows // k


def pack(codes: ArrayLike, *, layout: Layout | str = Layout.U8_4) -> NDArray:
    """hqq's BitPack.pack_<layout>: codes [R, C] uint8 -> [R / k, C] uint8 (k = 8 / b), or
    int32 [ceil(R / 10), C] for 3bit_32 (rows padded with zero codes to a multiple of 10)."""
    layout = member(layout, Layout, "layout")
    codes = np.asarray(codes)
    if codes.dtype != np.uint8:
        raise TypeError(f"codes: expected uint8, got {codes.dtype}")
    if codes.ndim != 2:
        raise ValueError(f"codes: expected a 2-d [rows, columns] array, got shape {codes.shape}")
    bits, k = FIELDS[layout]
    if codes.size and int(codes.max()) >> bits:
        raise ValueError(f"codes: {layout.value} holds {bits}-bit codes 0..{(1 << bits) - 1}, got {int(codes.max())}")
    if layout is Layout.I32_3:
        codes = np.concatenate([codes, np.zeros((-codes.shape[0] % 10, codes.shape[1]), np.uint8)])
    n = _slices(codes.shape[0], k, "codes")
    word = np.uint32 if layout is Layout.I32_3 else np.uint8
    parts = codes.reshape(k, n, codes.shape[1]).astype(word)  # slice j: rows [j n, (j + 1) n)
    shifts = (bits * np.arange(k - 1, -1, -1)).astype(word)  # slice 0 in the top field
    out = np.bitwise_or.reduce(parts << shifts[:, None, None], axis=0)
    return out.view(np.int32) if layout is Layout.I32_3 else out


def unpack(packed: ArrayLike, *, layout: Layout | str = Layout.U8_4) -> NDArray[np.uint8]:
    """hqq's BitPack.unpack_<layout>: [n, C] -> codes [k n, C] uint8, every field read
    (3bit_32 returns the padding rows too, as hqq does; its dequantize cuts them)."""
    layout = member(layout, Layout, "layout")
    packed = np.asarray(packed)
    want = np.int32 if layout is Layout.I32_3 else np.uint8
    if packed.dtype != want:
        raise TypeError(f"packed: {layout.value} words are {np.dtype(want).name}, got {packed.dtype}")
    if packed.ndim != 2:
        raise ValueError(f"packed: expected a 2-d [rows, columns] array, got shape {packed.shape}")
    bits, k = FIELDS[layout]
    words = packed.view(np.uint32) if layout is Layout.I32_3 else packed
    shifts = (bits * np.arange(k - 1, -1, -1)).astype(words.dtype)
    fields = (words[None] >> shifts[:, None, None]) & ((1 << bits) - 1)  # [k, n, C]
    return fields.reshape(k * packed.shape[0], packed.shape[1]).astype(np.uint8)


def _text(value: str) -> NDArray[np.uint8]:
    return np.frombuffer(value.encode("ascii"), dtype=np.uint8).copy()


def state_dict(w: ArrayLike, *, bits: int = 4, group: int = 64, axis: int = 1,
               compute_dtype: str = "float16") -> dict[str, NDArray]:
    """The tensors hqq 0.2.8's HQQLinear.state_dict() holds (encoded: scalars as 0-d
    tensors, strings as uint8 characters) for a weight w [out, in] quantized as
    BaseQuantizeConfig(nbits=bits, group_size=group, axis=axis) does it (optimize, round_zero
    for 4 bits only), with no bias: W_q packed, scale and zero in `compute_dtype`."""
    w = np.asarray(w)
    if w.ndim != 2:
        raise ValueError(f"w: expected a [out, in] weight, got shape {w.shape}")
    if compute_dtype not in ("float16", "float32"):
        raise ValueError(f"compute_dtype: expected 'float16' or 'float32', got {compute_dtype!r}")
    bits = integer(bits, "bits", choices=BITS)
    codes, scale, zero = quantize(w, bits=bits, group=group, axis=axis, round_zero=bits == 4)
    layout = LAYOUT_OF_BITS[bits]
    flags = {"view_as_float": False, "quant_scale": False, "quant_zero": False, "offload_meta": False,
             "encoded_state_dict": True, "stores_quant_config": True, "channel_wise": True, "optimize": True,
             "round_zero": bits == 4}
    view = "torch.int32" if layout is Layout.I32_3 else "torch.uint8"
    return {"W_q": pack(codes, layout=layout), "scale": scale.astype(compute_dtype),
            "zero": zero.astype(compute_dtype), "shape": np.array(w.shape, np.int64),
            "nbits": np.array(bits, np.int32), "group_size": np.array(group, np.int32),
            "axis": np.array(axis, np.int32), "packing": _text(layout.value), "unpack_view_dtype": _text(view),
            "compute_dtype": _text(f"torch.{compute_dtype}"),
            **{k: np.array(int(v), np.uint8) for k, v in flags.items()}}


def load_state_dict(tensors: dict[str, NDArray]) -> NDArray[np.float32]:
    """An HQQLinear state dict -> the float32 weight [out, in] it stores: unpack W_q by
    its `packing`, cut 3-bit padding rows to the grouped shape, (codes - zero) * scale."""
    layout = Layout(bytes(np.asarray(tensors["packing"], np.uint8)).decode("ascii"))
    shape = tuple(int(n) for n in np.asarray(tensors["shape"]))
    group, axis = int(tensors["group_size"]), int(tensors["axis"])
    rows = group if axis == 0 else int(np.prod(shape)) // group
    codes = unpack(np.asarray(tensors["W_q"]), layout=layout)[:rows]
    scale, zero = (np.asarray(tensors[k]).astype(np.float32) for k in ("scale", "zero"))
    return dequantize(codes, scale, zero).reshape(shape)
