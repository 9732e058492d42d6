"""The AWQ bug corpus: wrong searches written the way AWQ ports have gone wrong, each one
step changed from the default run's kernel (ref.conformance.adapters.numpy_awq), and
correct alternatives that must pass.

AWQ_BUGS: name -> (op, flag, kernel). `bug(name)` is the Implementation of that one op;
`CORRECT`: name -> Implementation of both ops.
"""

from __future__ import annotations

import numpy as np

from corpus import patched
from ref.conformance.adapters import numpy_awq as K
from ref.conformance.implementation import Implementation

SCALES, CLIP, QUANTIZE = "quant.awq.search_scales", "quant.awq.search_clip", "quant.awq.quantize"
INVALID = "InvalidInput"
F32 = np.float32


def _scales(**steps):
    def kernel(x, w, bits=4, group=128, duo_scaling=False, grid="awq"):
        return K.search_scales(x, w, bits=bits, group=group, duo_scaling=duo_scaling, grid_kind=grid, **steps)
    return kernel


def _clip(**steps):
    def kernel(x, w, bits=4, group=128):
        return K.clip_search(x, w, bits=bits, group=group, **steps)
    return kernel


def _wrong_side(w, s, bits, g):
    """Q(W / s) * s: the salient channels shrunk before quantization (x * s fed in)."""
    return K.pseudo_quantize(w / s[None, :], bits, g) * s[None, :]


def _unnormalized(xm, wm, ratio, duo):
    """x_mean^alpha without the division by sqrt(max * min)."""
    r = F32(ratio)
    if duo:
        return np.maximum(xm ** r / (wm ** (F32(1) - r) + F32(1e-4)), F32(1e-4)).astype(F32)
    return np.maximum(xm ** r, F32(1e-4)).astype(F32)


def _unclamped(xm, wm, ratio, duo):
    """x_mean^alpha normalized without the 1e-4 floor: a dead channel's 0 makes min(s) = 0."""
    r = F32(ratio)
    s = (xm ** r / (wm ** (F32(1) - r) + F32(1e-4))) if duo else xm ** r
    with np.errstate(divide="ignore", invalid="ignore"):
        s = s / np.sqrt(s.max() * s.min())
    s[~np.isfinite(s)] = 1
    return s.astype(F32)


def _duo_exponent_swapped(xm, wm, ratio, duo):
    """Duo scaling with w_mean^alpha in the denominator instead of w_mean^(1 - alpha)."""
    return K.scales_for(xm, wm ** (F32(ratio) / max(F32(1) - F32(ratio), F32(1e-3))), ratio, duo) if duo else \
        K.scales_for(xm, wm, ratio, duo)


def _raw_w_mean(w, g):
    """w_mean as the mean of |W| per column, not normalized by each group's amax."""
    return np.abs(w).mean(axis=0, dtype=F32)


def _loss_on_weights(x, w, *, bits=4, group=128, duo_scaling=False, grid="awq"):
    """mean((W - Q(W s) / s)^2): the activations do not weigh the error."""
    xs, ws, g = K.check(x, w, bits, group)
    xm, wm = K.x_mean(xs), K.w_mean(ws, g)
    tried = [K.scales_for(xm, wm, r, d) for r, d in K.grid(20, duo_scaling, grid)]
    losses = [float(np.mean((ws - K.scaled_weight(ws, s, int(bits), g)).astype(np.float64) ** 2)) for s in tried]
    best = K.pick(losses)
    return tried[best], np.int64(best), np.array(losses)


def _grid_with_one(n_grid, duo, kind):
    """alpha = i / (n - 1) where the reference's i / n is declared: 1.0 tried, 0.95 not."""
    return [(i / (n_grid - 1), duo) for i in range(n_grid)]


def _grid_without_zero(n_grid, duo, kind):
    """alpha = (i + 1) / n: plain RTN (alpha 0) never tried."""
    return [((i + 1) / n_grid, duo) for i in range(n_grid)]


def _last_minimum(losses):
    return int(len(losses) - 1 - np.argmin(np.asarray(losses)[::-1]))


def _argmax(losses):
    return int(np.argmax(losses))


def _amax_over_rows(wb):
    """The threshold's amax taken over the output rows too (axis 0 as well as the group)."""
    return np.broadcast_to(np.abs(wb).max(axis=(0, -1), keepdims=True), wb.shape[:-1] + (1,)).copy()


def _clip_whole_row(x, w, *, bits=4, group=128):
    """One threshold per row: amax over the whole row, clipped and judged together, broadcast to its groups."""
    xs, ws, g = K.check(x, w, bits, group)
    per_row = K.clip_search(xs, ws, bits=bits, group=-1)  # [out, 1]
    return np.repeat(per_row, ws.shape[1] // g, axis=1)


def _from_one(n):
    """Shrink steps i = 1 .. n: the unclipped range never tried."""
    return range(1, n + 1)


def _first_tokens(a, n):
    """The first 512 tokens instead of every max(1, n // 512)-th."""
    return a[:n]


def _all_tokens(a, n):
    return a


def _symmetric_clamp_upper_only(v, m):
    """Only the upper end clamped (min(w, max_val)), the negative tail kept."""
    return np.minimum(v, m)


def _quantize(**steps):
    def kernel(w, bits=4, group=128):
        return K.quantize(w, bits=bits, group=group, **steps)
    return kernel


def _range_with_zero(v):
    """GPTQ's range: min(w, 0) .. max(w, 0)."""
    lo, hi = K.group_range(v)
    return np.minimum(lo, F32(0)), np.maximum(hi, F32(0))


def _unclamped_zero(lo, scales, qmax):
    return -np.round(lo / scales)


def _half_away(v):
    return np.sign(v) * np.floor(np.abs(v) + F32(0.5))


def _first_chunk_mean(x):
    """x_mean from the first 1024-token chunk's sum alone, divided by every token's count
    (llm-compressor before 0.11 kept the first batch's sum)."""
    return np.abs(x[:1024]).sum(axis=0, dtype=F32) / F32(x.shape[0])


def _mean_of_chunk_means(x):
    """x_mean as the mean of the 1024-token chunks' means (a short last chunk weighs as a full one)."""
    means = [np.abs(x[i:i + 1024]).mean(axis=0, dtype=F32) for i in range(0, x.shape[0], 1024)]
    return (np.sum(means, axis=0, dtype=F32) / F32(len(means))).astype(F32)


def _duo_first_point(n_grid, duo, kind):
    """llm-compressor's duo grid with its first point (alpha 0) duo-scaled too, not plain."""
    points = K.grid(n_grid, duo, kind)
    return [(0.0, True)] + points[1:] if duo and kind == "llmcompressor" else points


def _float16_mean(x):
    """x_mean summed in float16 (half-precision activations accumulated at their own width)."""
    return (np.abs(x.astype(np.float16)).sum(axis=0, dtype=np.float16).astype(F32) / F32(x.shape[0])).astype(F32)


def _every_bits(bits):
    """bits 2 to 8 accepted (5, 6 and 7 too): the spec refuses all but 2, 3, 4 and 8."""
    return (2, 3, 4, 5, 6, 7, 8)


def _group_minus_one_as_128(w, bits=4, group=128):
    """group -1 read as AutoAWQ's default 128 whenever 128 divides the inputs."""
    cols = np.asarray(w).shape[-1] if np.ndim(w) == 2 else 0
    return K.quantize(w, bits=bits, group=128 if group == -1 and cols % 128 == 0 else group)


def _groups_along_rows(w, bits=4, group=128):
    """Groups of `group` consecutive output rows (the transposed layout) where they divide the
    rows; scales and zeros laid out in the reference's shape."""
    w = np.asarray(w)
    if w.ndim != 2 or group == -1 or not w.shape[0] or w.shape[0] % group:
        return K.quantize(w, bits=bits, group=group)
    codes, scales, zeros = K.quantize(np.ascontiguousarray(w.T), bits=bits, group=group)  # [in, out/g]
    shape = (w.shape[0], w.shape[1] // group)
    return codes.T.copy(), scales.reshape(shape), zeros.reshape(shape)


def _strided_then_cut(a, n):
    """Every max(1, t // 512)-th token, then cut to the first 512 of them."""
    return a[::max(1, a.shape[0] // n)][:n]


AWQ_BUGS = {
    "scales applied to the wrong side (Q(W / s) * s)": (SCALES, "ScaleSide", _scales(weight=_wrong_side)),
    "scales not normalized by sqrt(max * min)": (SCALES, "ScaleNorm", _scales(scales=_unnormalized)),
    "scales not clamped at 1e-4 (a dead channel's 0)": (SCALES, "ScaleFloor", _scales(scales=_unclamped)),
    "loss on the weights instead of the outputs": (SCALES, "LossOnOutput", _loss_on_weights),
    "grid i / (n - 1): 1.0 included": (SCALES, "ScaleGrid", _scales(points=_grid_with_one)),
    "grid (i + 1) / n: alpha 0 missing": (SCALES, "ScaleGrid", _scales(points=_grid_without_zero)),
    "the largest loss chosen": (SCALES, "Random", _scales(choose=_argmax)),
    "duo scaling with w_mean^alpha": (SCALES, "DuoScaling", _scales(scales=_duo_exponent_swapped)),
    "duo scaling's w_mean not normalized per group": (SCALES, "DuoScaling", _scales(mean_w=_raw_w_mean)),
    "clip threshold over the output rows": (CLIP, "ClipAxis", _clip(amax_of=_amax_over_rows)),
    "clip threshold and error over the whole row": (CLIP, "ClipLoss", _clip_whole_row),
    "clip grid from i = 1 (no clip never tried)": (CLIP, "ClipGrid", _clip(shrinks=_from_one)),
    "clip search on the first 512 tokens": (CLIP, "ClipSample", _clip(sample=_first_tokens)),
    "clip search on every token": (CLIP, "ClipSample", _clip(sample=_all_tokens)),
    "clip clamps the upper end only": (CLIP, "ClipAxis", _clip(clamp=_symmetric_clamp_upper_only)),
    "quantizer range forced to include zero (GPTQ's)": (QUANTIZE, "ZeroRange", _quantize(span=_range_with_zero)),
    "quantizer zero point not clamped": (QUANTIZE, "ZeroRange", _quantize(zero=_unclamped_zero)),
    "quantizer range not floored at 1e-5": (QUANTIZE, "RangeFloor",
                                            patched(_quantize(), K, "RANGE_FLOOR", lambda _: F32(0))),
    "quantizer rounds half away from zero": (QUANTIZE, "TiesToEven", patched(_quantize(), K, "rounded",
                                                                            lambda _: _half_away)),
    # issue 14 (the adversary's accepted mutants)
    "of equal losses the last chosen (<=)": (SCALES, "TieRule", _scales(choose=_last_minimum)),
    "x_mean from the first 1024-token chunk": (SCALES, "TokenMean",
                                               patched(_scales(), K, "x_mean", lambda _: _first_chunk_mean)),
    "x_mean as the mean of chunk means": (SCALES, "TokenMean",
                                          patched(_scales(), K, "x_mean", lambda _: _mean_of_chunk_means)),
    "llm-compressor duo grid: alpha 0 duo-scaled": (SCALES, "ScaleGrid", _scales(points=_duo_first_point)),
    "x_mean summed in float16": (SCALES, "Float16Input", patched(_scales(), K, "x_mean", lambda _: _float16_mean)),
    "search accepts bits 5 to 7": (SCALES, INVALID, patched(_scales(), K, "BITS", _every_bits)),
    "clip accepts bits 5 to 7": (CLIP, INVALID, patched(_clip(), K, "BITS", _every_bits)),
    "quantizer accepts bits 5 to 7": (QUANTIZE, INVALID, patched(_quantize(), K, "BITS", _every_bits)),
    "quantizer reads group -1 as 128": (QUANTIZE, "Random", _group_minus_one_as_128),
    "quantizer groups along the output rows": (QUANTIZE, "Random", _groups_along_rows),
    "of equal clip errors the last kept (<=)": (CLIP, "TieRule", _clip(better=np.less_equal)),
    "clip error starts at inf, not 1e9": (CLIP, "ClipGrid", _clip(error_start=F32(np.inf))),
    "clip error summed over tokens": (CLIP, "ClipLoss", _clip(over_tokens=lambda e: e.sum(axis=1))),
    "clip tokens strided, then cut to 512": (CLIP, "ClipSample", _clip(sample=_strided_then_cut)),
}


def bug(name: str) -> Implementation:
    op, _, kernel = AWQ_BUGS[name]
    return Implementation(name, {op: kernel}, variants={op: K.VARIANTS[op]})


# ------------------------------------------------------------------ correct alternatives


def _float64_pick_last_search(x, w, bits=4, group=128, duo_scaling=False, grid="awq"):
    """The default kernel with the float output and the quantized one subtracted in float64."""
    def loss64(reference, x, q):
        d = x.astype(np.float64) @ q.T.astype(np.float64) - reference.astype(np.float64)
        return float(np.mean(d * d))
    return K.search_scales(x, w, bits=bits, group=group, duo_scaling=duo_scaling, grid_kind=grid, error=loss64)


CORRECT = {
    "float32 kernel, clip rows in blocks of 64": Implementation("numpy awq", dict(K.OPS), variants=dict(K.VARIANTS)),
    "float64 loss": Implementation("numpy awq, float64 loss",
                                   {SCALES: _float64_pick_last_search, CLIP: K.OPS[CLIP], QUANTIZE: K.OPS[QUANTIZE]},
                                   variants=dict(K.VARIANTS)),
}
