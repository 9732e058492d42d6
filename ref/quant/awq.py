"""AWQ, activation-aware weight quantization (Lin et al., arXiv:2306.00978), as the
reference code (mit-han-lab/llm-awq auto_scale.py, auto_clip.py) and AutoAWQ 0.2.9
(awq/quantize/quantizer.py) run it: in float64, but for the quantizer, whose float32
arithmetic is part of its definition (as every library runs it; see search_clip).

A few input channels carry most of the activation magnitude; scaling those weight
columns up before quantization (and the activations down by the same factor)
protects them. For a linear layer y = x W^T with W [out, in] and x [n, in]:

  x_mean = mean over tokens of |x|                                   [in]
  s(alpha) = clamp(x_mean^alpha, 1e-4)                               (plain)
           = clamp(x_mean^alpha / (w_mean^(1 - alpha) + 1e-4), 1e-4) (duo scaling)
  s = s / sqrt(max(s) * min(s));  a non-finite s_j becomes 1
  loss(alpha) = mean over [n, out] of (x W^T - x (Q(W s) / s)^T)^2
  alpha* = the first grid point with the smallest loss (strict <: ties go to the smaller alpha)

then the clip search on W s with inputs x / s (auto_clip): per output row and group
of `group` input channels, max_val = amax * (1 - i / 20) for i = 0 .. 9, weights
clamped to [-max_val, max_val], quantized, and the one with the smallest mean over
tokens of the group's partial output error (sum over the group of x (Q(w) - w))^2 kept.
The activations of the clip search are every `step`-th token, step = max(1, n // 512).

Q is AWQ's quantizer (pseudo_quantize_tensor), asymmetric over each group's own
min and max (the range is not forced to include zero):
  scale = max(max - min, 1e-5) / (2^b - 1),  zero = clamp(-round(min / scale), 0, 2^b - 1)
  code = clamp(round(w / scale) + zero, 0, 2^b - 1),  w' = (code - zero) * scale
round is half to even (torch.round).

The block output. The reference measures the loss on the output of the block that
reads the scaled linears (the attention for q/k/v, the MLP for gate/up). Here the
block is the linear case: several linears that share the input are one W with their
rows stacked (the loss is a mean over every output and the quantizer works per row
group, so neither sees where one linear ends). The reference's clip search skips
q/k projections (their error reaches the output through q k^T): call it for the
others only.

Folding. x / s is never computed at inference: 1/s goes into the operation that
produces x, a norm's weight and bias (`fold_norm`) or the previous linear's output
rows (`fold_linear`, the last len(s) rows as AutoAWQ's scale_fc_fc does), and s into
the weights (`scale_weights`).
"""

from __future__ import annotations

import enum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import boolean, integer, member

__all__ = ["BITS", "CLIP_ERROR_START", "DUO_EPS", "Grid", "MAX_SHRINK", "N_GRID", "N_SAMPLE_TOKEN", "RANGE_FLOOR",
           "SCALE_FLOOR", "W_MEAN_EPS", "activation_means", "awq", "candidates", "clip", "clip_candidates",
           "dequantize", "fake_quantize", "fold_linear", "fold_norm", "quantize", "scale_weights", "scales_at",
           "search_clip", "search_scales", "weight_means"]

BITS = (2, 3, 4, 8)
N_GRID = 20  # grid points of the scale search (and of the clip search's shrink)
MAX_SHRINK = 0.5  # the clip search shrinks the range to at most 1 - 0.5 (it stops at 0.55)
N_SAMPLE_TOKEN = 512  # the clip search reads every max(1, n // 512)-th token
SCALE_FLOOR = 1e-4  # x_mean^alpha (or the duo ratio) clamped below
DUO_EPS = 1e-4  # added to w_mean^(1 - alpha) in the duo ratio
W_MEAN_EPS = 1e-6  # added to each group's amax when w_mean normalizes |W|
RANGE_FLOOR = np.float32(1e-5)  # the quantizer's max - min clamped below
F32 = np.float32
CLIP_ERROR_START = 1e9  # the clip search's starting "best" error: a shrink must beat it to be kept


class Grid(enum.Enum):
    AWQ = "awq"  # alpha = i / n_grid, i = 0 .. n_grid - 1 (llm-awq, AutoAWQ): 0 in, 1 out
    LLMCOMPRESSOR = "llmcompressor"  # alpha = i / (n_grid - 1) (1 in); with duo: (0, plain) then i / (n_grid - 2) duo


def _floats(a: ArrayLike, name: str, ndim: int | None = None) -> NDArray[np.float64]:
    a = np.asarray(a)
    if a.dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(f"{name}: expected float16, float32 or float64, got {a.dtype}")
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name}: AWQ takes finite values (found NaN or Inf)")
    return a.astype(np.float64)


def _group(group: int, cols: int) -> int:
    """The group size along the input axis; -1 is one group per row (per channel)."""
    group = integer(group, "group", minimum=-1)
    if group == 0:
        raise ValueError("group: expected -1 (per channel) or a positive size, got 0")
    g = cols if group == -1 else group
    if cols == 0 or cols % g:
        raise ValueError(f"group: {group} does not divide the input dimension {cols}")
    return g


def _layer(x: ArrayLike, w: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """x [..., in] -> [n, in] and w [out, in], both float64, checked against each other."""
    w = _floats(w, "w", ndim=2)
    if w.size and np.abs(w).max() > np.finfo(np.float32).max:
        raise ValueError("w: weights beyond float32's range (the quantizer reads them as float32)")
    x = _floats(x, "x")
    if x.ndim < 1 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"x: the last axis must be w's input dimension {w.shape[1]}, got shape {x.shape}")
    x = x.reshape(-1, w.shape[1])
    if x.shape[0] == 0 or w.shape[0] == 0:
        raise ValueError(f"x, w: AWQ needs at least one token and one output row, got {x.shape} and {w.shape}")
    return x, w


# ------------------------------------------------------------------ the quantizer


def quantize(w: ArrayLike, *, bits: int = 4, group: int = 128):
    """AWQ's quantizer in float32 arithmetic: w [out, in] (rounded to float32 first)
    -> (codes [out, in] int64, scales [out, in/g] float32, zeros [out, in/g] float32),
    asymmetric over each group's own min and max."""
    bits = integer(bits, "bits", choices=BITS)
    with np.errstate(over="ignore"):
        w = _floats(w, "w", ndim=2).astype(np.float32)
    g = _group(group, w.shape[1])
    codes, scale, zero = _quantize(w.reshape(w.shape[0], w.shape[1] // g, g), bits)
    if not (np.isfinite(w).all() and np.isfinite(scale).all()):
        raise ValueError("w: a weight or a group's range max - min overflows float32")
    return codes.reshape(w.shape).astype(np.int64), scale, zero


def _quantize(wg: NDArray[np.float32], bits: int):
    """wg [..., g] float32 -> (codes [..., g], scale [...], zero [...]), all float32."""
    qmax = F32((1 << bits) - 1)
    hi, lo = wg.max(axis=-1), wg.min(axis=-1)
    with np.errstate(over="ignore", invalid="ignore"):
        scale = np.maximum(hi - lo, RANGE_FLOOR) / qmax
    zero = np.clip(-np.rint(lo / scale), F32(0), qmax)
    codes = np.clip(np.rint(wg / scale[..., None]) + zero[..., None], F32(0), qmax)
    return codes, scale, zero


def _fake_quantize(wg: NDArray[np.float32], bits: int) -> NDArray[np.float32]:
    """Q over groups wg [..., g] float32, dequantized in float32."""
    codes, scale, zero = _quantize(wg, bits)
    return (codes - zero[..., None]) * scale[..., None]


def dequantize(codes: ArrayLike, scales: ArrayLike, zeros: ArrayLike) -> NDArray[np.float32]:
    """(codes [out, in], scales and zeros [out, in/g] float32) -> (codes - zero) * scale
    [out, in] in float32."""
    codes, scales, zeros = np.asarray(codes), np.asarray(scales, np.float32), np.asarray(zeros, np.float32)
    if codes.ndim != 2 or scales.shape != zeros.shape or scales.shape[:1] != codes.shape[:1] or \
            (scales.size and codes.shape[1] % scales.shape[1]):
        raise ValueError(f"codes, scales, zeros: shapes {codes.shape}, {scales.shape}, {zeros.shape} do not fit")
    g = codes.shape[1] // max(1, scales.shape[1])
    cg = codes.reshape(codes.shape[0], -1, g).astype(np.float32)
    return ((cg - zeros[..., None]) * scales[..., None]).astype(np.float32).reshape(codes.shape)


def fake_quantize(w: ArrayLike, *, bits: int = 4, group: int = 128) -> NDArray[np.float32]:
    """Q(w): quantized and dequantized (pseudo_quantize_tensor's output), float32."""
    return dequantize(*quantize(w, bits=bits, group=group))


# ------------------------------------------------------------------ the scale search


def activation_means(x: ArrayLike) -> NDArray[np.float64]:
    """x [..., in] -> mean over every token of |x| [in] (AWQ's per-channel statistic)."""
    x = _floats(x, "x")
    if x.ndim < 1:
        raise ValueError("x: expected at least one dimension (the channels)")
    flat = np.abs(x.reshape(-1, x.shape[-1]))  # [n, in]
    if flat.shape[0] == 0:
        raise ValueError("x: no tokens to average")
    return flat.mean(axis=0)


def weight_means(w: ArrayLike, *, group: int = 128) -> NDArray[np.float64]:
    """Duo scaling's w_mean [in]: |w| over its group's amax + 1e-6, averaged over the
    rows of w [out, in] (the stacked linears)."""
    w = _floats(w, "w", ndim=2)
    g = _group(group, w.shape[1])
    wg = np.abs(w).reshape(w.shape[0], -1, g)  # [out, in/g, g]
    normalized = wg / (wg.max(axis=-1, keepdims=True) + W_MEAN_EPS)
    return normalized.reshape(w.shape).mean(axis=0)


def candidates(*, n_grid: int = N_GRID, duo_scaling: bool = False,
               grid: Grid | str = Grid.AWQ) -> list[tuple[float, bool]]:
    """The grid of (alpha, duo) the scale search tries, in order."""
    n_grid = integer(n_grid, "n_grid", minimum=3)
    duo = boolean(duo_scaling, "duo_scaling")
    grid = member(grid, Grid, "grid")
    if grid is Grid.AWQ:
        return [(i / n_grid, duo) for i in range(n_grid)]
    if not duo:
        return [(i / (n_grid - 1), False) for i in range(n_grid)]
    return [(0.0, False)] + [(i / (n_grid - 2), True) for i in range(n_grid - 1)]


def scales_at(x_mean: NDArray, w_mean: NDArray | None, alpha: float, duo: bool) -> NDArray[np.float64]:
    """s(alpha) [in], normalized by sqrt(max(s) * min(s)); non-finite entries set to 1."""
    if duo:
        s = np.maximum(x_mean ** alpha / (w_mean ** (1 - alpha) + DUO_EPS), SCALE_FLOOR)
    else:
        s = np.maximum(x_mean ** alpha, SCALE_FLOOR)
    with np.errstate(over="ignore", invalid="ignore"):
        s = s / np.sqrt(s.max() * s.min())
    return np.where(np.isfinite(s), s, 1.0)


def scale_weights(w: ArrayLike, s: ArrayLike) -> NDArray[np.float64]:
    """W s: column j of w [out, in] times s_j."""
    return np.asarray(w, np.float64) * np.asarray(s, np.float64)[None, :]


def _losses(x: NDArray, w: NDArray, s: NDArray, bits: int, group: int) -> NDArray[np.float64]:
    """mean over [n, out] of (x W^T - x (Q(W s) / s)^T)^2 for each row of s [k, in], as
    x (W - Q(W s) / s)^T (the float64 difference, without the cancellation)."""
    ws = (w[None] * s[:, None, :]).astype(np.float32)  # [k, out, in]
    q = _fake_quantize(ws.reshape(*ws.shape[:2], -1, group), bits).reshape(ws.shape) / s[:, None, :]
    return np.mean(np.matmul(x, np.swapaxes(w[None] - q, 1, 2)) ** 2, axis=(1, 2))  # [k]


def search_scales(x: ArrayLike, w: ArrayLike, *, bits: int = 4, group: int = 128, duo_scaling: bool = False,
                  grid: Grid | str = Grid.AWQ, n_grid: int = N_GRID):
    """x [..., in], w [out, in] (the linears sharing x, rows stacked) -> (s [in],
    choice int64 (the index of the chosen grid point), losses [n_grid] float64)."""
    bits = integer(bits, "bits", choices=BITS)
    x, w = _layer(x, w)
    g = _group(group, w.shape[1])
    points = candidates(n_grid=n_grid, duo_scaling=duo_scaling, grid=grid)
    x_mean = activation_means(x)
    w_mean = weight_means(w, group=g) if any(duo for _, duo in points) else None
    all_s = [scales_at(x_mean, w_mean, alpha, duo) for alpha, duo in points]
    losses = _losses(x, w, np.stack(all_s), bits, g)
    best = -1
    for i, loss in enumerate(losses):  # strict <: the first of equal losses wins, NaN never does
        if loss < (losses[best] if best >= 0 else np.inf):
            best = i
    if best < 0:
        raise ValueError("x, w: no finite loss on the grid")
    return all_s[best], np.int64(best), losses


# ------------------------------------------------------------------ the clip search


def clip_candidates(*, n_grid: int = N_GRID, max_shrink: float = MAX_SHRINK) -> NDArray[np.float32]:
    """The factors fl32(1 - i / n_grid), i = 0 .. int(max_shrink * n_grid) - 1, that
    multiply each group's amax (in float32, as a float32 tensor times a Python float)."""
    n_grid = integer(n_grid, "n_grid", minimum=1)
    return np.array([1 - i / n_grid for i in range(int(max_shrink * n_grid))], np.float32)


def clip(w: ArrayLike, max_val: ArrayLike, *, group: int = 128) -> NDArray[np.float32]:
    """w [out, in] clamped to [-max_val, max_val] per group (max_val [out, in/g]), float32."""
    w = np.asarray(w, np.float32)
    g = _group(group, w.shape[1])
    m = np.asarray(max_val, np.float32)[..., None]
    return np.clip(w.reshape(w.shape[0], -1, g), -m, m).reshape(w.shape)


def _group_outputs(xk: NDArray, wk: NDArray) -> NDArray[np.float64]:
    """Partial outputs per group: xk [in/g, t, g], wk [..., in/g, g, out] -> [..., in/g, t, out]."""
    return np.matmul(xk, wk.astype(np.float64))


def search_clip(x: ArrayLike, w: ArrayLike, *, bits: int = 4, group: int = 128,
                n_sample_token: int = N_SAMPLE_TOKEN) -> NDArray[np.float32]:
    """x [..., in] (the inputs the linear sees: x / s after scaling), w [out, in] (W s,
    rounded to float32: the weights the quantizer reads) -> the clip threshold
    max_val [out, in/g] float32 of each group."""
    bits = integer(bits, "bits", choices=BITS)
    n_sample_token = integer(n_sample_token, "n_sample_token", minimum=1)
    x, w = _layer(x, w)
    w = w.astype(np.float32)
    g = _group(group, w.shape[1])
    step = max(1, x.shape[0] // n_sample_token)
    xk = x[::step].reshape(-1, w.shape[1] // g, g).transpose(1, 0, 2)  # [in/g, t, g]
    wg = w.reshape(w.shape[0], -1, g)  # [out, in/g, g]
    amax = np.abs(wg).max(axis=-1)  # [out, in/g]
    reference = _group_outputs(xk, wg.transpose(1, 2, 0))  # [in/g, t, out]
    max_val = amax[None] * clip_candidates()[:, None, None]  # [steps, out, in/g], float32
    q = _fake_quantize(np.clip(wg[None], -max_val[..., None], max_val[..., None]), bits)  # [steps, out, in/g, g]
    err = np.mean((_group_outputs(xk, q.transpose(0, 2, 3, 1)) - reference) ** 2, axis=2).transpose(0, 2, 1)
    best_err = np.full(amax.shape, CLIP_ERROR_START)  # err: [steps, out, in/g]
    best = amax.copy()
    for step_err, step_val in zip(err, max_val):  # strict <: the smallest shrink of equal errors wins
        better = step_err < best_err
        best_err = np.where(better, step_err, best_err)
        best = np.where(better, step_val, best)
    return best


# ------------------------------------------------------------------ folding and the whole layer


def fold_norm(weight: ArrayLike, bias: ArrayLike | None, s: ArrayLike):
    """A norm's (weight [in], bias [in] or None) with 1/s folded in: (weight / s, bias / s)."""
    s = np.asarray(s, np.float64)
    weight = np.asarray(weight, np.float64)
    if weight.shape != s.shape:
        raise ValueError(f"weight: expected shape {s.shape}, got {weight.shape}")
    return weight / s, None if bias is None else np.asarray(bias, np.float64) / s


def fold_linear(weight: ArrayLike, bias: ArrayLike | None, s: ArrayLike):
    """The previous linear's (weight [out', in'], bias [out'] or None) with 1/s folded
    into its last len(s) output rows (all of them when out' = len(s))."""
    s = np.asarray(s, np.float64)
    weight = np.array(weight, np.float64)
    if weight.ndim != 2 or weight.shape[0] < s.size:
        raise ValueError(f"weight: expected at least {s.size} output rows, got shape {weight.shape}")
    weight[weight.shape[0] - s.size:] /= s[:, None]
    if bias is not None:
        bias = np.array(bias, np.float64)
        bias[bias.shape[0] - s.size:] /= s
    return weight, bias


def awq(x: ArrayLike, w: ArrayLike, *, bits: int = 4, group: int = 128, duo_scaling: bool = False,
        grid: Grid | str = Grid.AWQ, apply_clip: bool = True):
    """The whole layer: x [..., in], w [out, in] -> (s [in], codes [out, in] int64,
    scales [out, in/g], zeros [out, in/g]) of Q(clip(W s)); 1/s is for the previous op."""
    apply_clip = boolean(apply_clip, "apply_clip")
    s, _, _ = search_scales(x, w, bits=bits, group=group, duo_scaling=duo_scaling, grid=grid)
    x, w = _layer(x, w)
    ws = scale_weights(w, s)
    if apply_clip:
        ws = clip(ws, search_clip(x / s, ws.astype(np.float32), bits=bits, group=group), group=group)
    return (s, *quantize(ws, bits=bits, group=group))
