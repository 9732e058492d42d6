"""DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2, spec/sparse.md#dsa):
which past tokens each query reads. float64, except the FP8 step, which is the
reference's float32 arithmetic made exact.

Per query token t (at key position p_t = t + S - T, bottom-right aligned) and key s:

    q', k'   = RoPE on the first rope_dim dims (cos, sin tables as inputs), then the
               normalized Walsh-Hadamard rotation H x / sqrt(Di)        (`rotate`)
    q'', k'' = FP8 E4M3 values times per-token, per-128-block scales     (`quantize`)
    I[t, s]  = scale * sum_h w[t, h] * ReLU(q''[t, h] . k''[s])          (`index_scores`)
               scale = Di^-0.5 * Hi^-0.5 (softmax_scale * n_heads^-0.5); -inf for s > p_t
    idx[t]   = the topk keys s <= p_t of largest I[t, s]                  (`select`)

One indexer key per token is shared by the Hi indexer heads; the weights w (the
`weights_proj` output, any sign) multiply after the ReLU. Variants (strings):
    pairing    "neox" (half split: DeepSeek-V3.2-Exp after commit 8631a81, transformers
               5's DeepseekV32Indexer) | "interleaved" (pairs (2i, 2i+1): the V3.2-Exp
               inference demo before that commit, GLM-5 by its config)
    quant      "fp8" (the reference: Hadamard, act_quant, fp8_index) | "none"
               (transformers: neither Hadamard nor FP8; the same scores in exact
               arithmetic up to the FP8 rounding, since H is orthogonal)
    scale_fmt  "ue8m0" (config_671B_v3.2.json: scales rounded up to powers of two) |
               "float" (scale_fmt None: amax / 448)

Reference: DeepSeek-AI, DeepSeek-V3.2-Exp (inference/model.py Indexer, kernel.py
act_quant and fp8_index).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import boolean, choice, integer, real
from ref.attention.checks import floats
from ref.attention.rope import pair_dims
from ref.formats.minifloat import decode, encode, round_to
from ref.quant.hadamard import emulate_transform, hadamard_transform

__all__ = ["E4M3_MAX", "PAIRINGS", "QUANTS", "SCALE_FMTS", "emulate_index_scores", "emulate_indexer_scores", "emulate_rotate", "index_scores",
           "indexer", "indexer_scores", "quantize", "rotate", "select"]

E4M3_MAX = 448.0
PAIRINGS = ("neox", "interleaved")
QUANTS = ("fp8", "none")
SCALE_FMTS = ("ue8m0", "float")
_F32 = np.float32


# ---------------------------------------------------------------------------- quantize

def quantize(x: ArrayLike, *, block_size: int = 128, scale_fmt: str = "ue8m0") -> tuple[NDArray, NDArray]:
    """act_quant: x [..., D] -> (values [..., D], scales [..., D / block_size]), float64.

    Per block of `block_size` along the last axis, in float32 as the kernel: x read as
    float32; amax = max(max |x|, 1e-4); s = amax * float32(1/448); ue8m0: s =
    2^ceil(log2 s); values = E4M3FN(clamp(x / s, -448, 448)), nearest-even. x ~
    values * s. A NaN or Inf in x is a ValueError (the kernel's result is undefined).
    """
    block_size = integer(block_size, "block_size", minimum=1)
    scale_fmt = choice(scale_fmt, "scale_fmt", SCALE_FMTS)
    arr = np.asarray(x)
    if arr.dtype.name not in ("float16", "bfloat16", "float32", "float64") or arr.ndim < 1:
        raise TypeError(f"x: expected a float array [..., D], got {arr.dtype} of shape {arr.shape}")
    d = arr.shape[-1]
    if d % block_size:
        raise ValueError(f"x: expected a last axis that block_size {block_size} divides, got {d}")
    xf = arr.astype(np.float64).astype(_F32)
    if not np.isfinite(xf).all():
        raise ValueError("x: expected finite values (act_quant's result for NaN or Inf is undefined)")
    blocks = xf.reshape(*xf.shape[:-1], d // block_size, block_size)  # [..., D / bs, bs]
    amax = np.maximum(np.abs(blocks).max(axis=-1, initial=_F32(0)), _F32(1e-4))  # [..., D / bs]
    s = (amax * _F32(1 / E4M3_MAX)).astype(_F32)
    if scale_fmt == "ue8m0":
        m, e = np.frexp(s)  # s = m * 2^e, 0.5 <= m < 1: ceil(log2 s) = e - 1 when m = 0.5, else e
        s = np.ldexp(_F32(1), np.where(m == 0.5, e - 1, e)).astype(_F32)
    y = np.clip((blocks / s[..., None]).astype(_F32), -E4M3_MAX, E4M3_MAX)
    values = decode(encode(y, "float8_e4m3fn"), "float8_e4m3fn").astype(np.float64).reshape(xf.shape)
    return values, s.astype(np.float64)


def _dequantize(x: NDArray, block_size: int, scale_fmt: str) -> NDArray[np.float64]:
    values, s = quantize(x, block_size=block_size, scale_fmt=scale_fmt)
    return values * np.repeat(s, block_size, axis=-1)


# ---------------------------------------------------------------------------- rotate

def _tables(cos, sin, rows: int, rope_dim: int) -> tuple[NDArray, NDArray]:
    c, s = floats(cos, "cos", 2), floats(sin, "sin", 2)
    if c.shape != (rows, rope_dim // 2) or s.shape != c.shape:
        raise ValueError(f"cos, sin: expected [{rows}, rope_dim/2 = {rope_dim // 2}] each, got {c.shape} and {s.shape}")
    return c, s


def _rope_dim(rope_dim: int, d: int) -> int:
    r = integer(rope_dim, "rope_dim", minimum=0, maximum=d)
    if r % 2:
        raise ValueError(f"rope_dim: expected an even number, got {r}")
    return r


def rotate(x: ArrayLike, cos: ArrayLike, sin: ArrayLike, *, rope_dim: int = 64, pairing: str = "neox",
           hadamard: bool = True) -> NDArray[np.float64]:
    """x [B, L, H, D] (positions along L) -> RoPE on dims 0..rope_dim-1 with pair i
    turned by (cos[l, i], sin[l, i]) [L, rope_dim/2], then (`hadamard`) H_D x / sqrt(D)
    over the last axis (Sylvester order, as fast_hadamard_transform). float64."""
    xf = floats(x, "x", 4)
    r = _rope_dim(rope_dim, xf.shape[3])
    c, s = _tables(cos, sin, xf.shape[1], r)
    ia, ib = pair_dims(r, "neox" if choice(pairing, "pairing", PAIRINGS) == "neox" else "gptj")
    a, b = xf[..., ia], xf[..., ib]  # [B, L, H, r/2]
    c, s = c[None, :, None], s[None, :, None]  # [1, L, 1, r/2]
    out = xf.copy()
    with np.errstate(invalid="ignore"):
        out[..., ia] = a * c - b * s
        out[..., ib] = b * c + a * s
    if not boolean(hadamard, "hadamard"):
        return out
    if out.shape[3] & (out.shape[3] - 1):
        raise ValueError(f"x: expected a head dim that is a power of two (the Hadamard's order), got {out.shape[3]}")
    return hadamard_transform(out) if out.shape[3] else out


def emulate_rotate(precision: str, x, cos, sin, *, rope_dim: int = 64, pairing: str = "neox",
                   hadamard: bool = True) -> NDArray[np.float64]:
    """`rotate` at `precision`: x, cos, sin stored at P; each product and the RoPE sum
    stored at P (transformers' eager `x * cos + rotate_half(x) * sin`); the Hadamard
    as ref.quant.hadamard.emulate_transform (float32 butterfly or dense, output at P)."""
    exact = rotate(x, cos, sin, rope_dim=rope_dim, pairing=pairing, hadamard=hadamard)  # checks
    if precision == "float64":
        return exact
    rnd = lambda v: round_to(v, precision)  # noqa: E731
    xf = rnd(floats(x, "x", 4))
    r = rope_dim
    ia, ib = pair_dims(r, "neox" if pairing == "neox" else "gptj")
    c, s = rnd(floats(cos, "cos", 2))[None, :, None], rnd(floats(sin, "sin", 2))[None, :, None]
    a, b = xf[..., ia], xf[..., ib]
    out = xf.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        out[..., ia] = rnd(rnd(a * c) - rnd(b * s))
        out[..., ib] = rnd(rnd(b * c) + rnd(a * s))
    return emulate_transform(precision, out) if hadamard and out.shape[3] else out


# ---------------------------------------------------------------------------- index_scores

def _score_inputs(q, k, w, scale):
    qf, kf, wf = floats(q, "q", 4), floats(k, "k", 3), floats(w, "w", 3)
    b, t, hi, di = qf.shape
    if kf.shape[0] != b or kf.shape[2] != di:
        raise ValueError(f"k: expected [B = {b}, S, Di = {di}] (one key per token for all heads), got {kf.shape}")
    if wf.shape != (b, t, hi):
        raise ValueError(f"w: expected [B, T, Hi] = {(b, t, hi)}, got {wf.shape}")
    if kf.shape[1] < t:
        raise ValueError(f"k: expected S >= T = {t} keys (queries sit at the last T positions), got {kf.shape[1]}")
    sc = (di ** -0.5 * hi ** -0.5 if di else 1.0) if scale is None else real(scale, "scale")
    return qf, kf, wf, sc


def _causal(t: int, s: int) -> NDArray[np.bool_]:
    return np.arange(s)[None, :] <= np.arange(t)[:, None] + (s - t)  # [T, S]: key s <= p_t


def index_scores(q: ArrayLike, k: ArrayLike, w: ArrayLike, *, scale: float | None = None,
                 causal: bool = True) -> NDArray[np.float64]:
    """q [B, T, Hi, Di], k [B, S, Di], w [B, T, Hi] -> I [B, T, S] float64:
    I[t, s] = scale * sum_h w[t, h] ReLU(q[t, h] . k[s]); -inf where s > t + S - T
    when `causal` (a key not seen is never read: a NaN there stays out)."""
    qf, kf, wf, sc = _score_inputs(q, k, w, scale)
    visible = _causal(qf.shape[1], kf.shape[1]) if boolean(causal, "causal") else True
    with np.errstate(invalid="ignore", over="ignore"):
        logits = np.einsum("bthd,bsd->bths", qf, kf)  # [B, T, Hi, S]
        scores = sc * np.einsum("bth,bths->bts", wf, np.maximum(logits, 0))  # NaN stays NaN
    return np.where(visible, scores, -np.inf)


def emulate_index_scores(precision: str, q, k, w, *, scale=None, causal=True) -> NDArray[np.float64]:
    """`index_scores` at `precision`: q, k, w stored at P; w * scale in float32 (the
    reference folds the scale into the weights); logits, ReLU, the weighted head sum
    in float32; the output kept in float32 (both references return float32)."""
    exact = index_scores(q, k, w, scale=scale, causal=causal)  # checks
    if precision == "float64":
        return exact
    qf, kf, wf, sc = _score_inputs(q, k, w, scale)
    q32, k32 = round_to(qf, precision).astype(_F32), round_to(kf, precision).astype(_F32)
    w32 = (round_to(wf, precision).astype(_F32) * _F32(sc)).astype(_F32)
    with np.errstate(invalid="ignore", over="ignore"):
        logits = np.einsum("bthd,bsd->bths", q32, k32).astype(_F32)
        scores = np.einsum("bth,bths->bts", w32, np.maximum(logits, _F32(0))).astype(_F32)
    return np.where(np.isneginf(exact), -np.inf, scores.astype(np.float64))


# ---------------------------------------------------------------------------- select

def select(scores: ArrayLike, *, topk: int, causal: bool = True) -> NDArray[np.int64]:
    """I [B, T, S] -> idx [B, T, topk] int64: per row the topk candidates of largest
    score, a candidate being a key s <= t + S - T (`causal`) whose score is not -inf.
    Ties: the lower index first. Fewer candidates than topk: the rest -1. Returned as
    a set: ascending, -1 last. A NaN score at a candidate is a ValueError."""
    sf = floats(scores, "scores", 3)
    topk = integer(topk, "topk", minimum=0)
    b, t, s = sf.shape
    cand = (_causal(t, s) if boolean(causal, "causal") else np.ones((t, s), bool)) & (sf != -np.inf)
    if np.isnan(np.where(cand, sf, 0)).any():
        raise ValueError("scores: expected no NaN at a key a row may select")
    keyed = np.where(cand, -sf, np.inf)  # ascending: the largest score first, non-candidates last
    order = np.argsort(keyed, axis=-1, kind="stable")[..., :topk]  # stable: ties keep the lower index first
    taken = np.take_along_axis(cand, order, axis=-1)
    idx = np.where(taken, order, -1)
    idx = np.concatenate([idx, np.full((b, t, max(topk - s, 0)), -1, idx.dtype)], axis=-1)
    return _as_set(idx)


def _as_set(idx: NDArray) -> NDArray[np.int64]:
    big = np.iinfo(np.int64).max
    srt = np.sort(np.where(idx < 0, big, idx), axis=-1)
    return np.where(srt == big, -1, srt).astype(np.int64)


# ---------------------------------------------------------------------------- indexer

def indexer(q: ArrayLike, k: ArrayLike, w: ArrayLike, cos: ArrayLike, sin: ArrayLike, *, topk: int,
            rope_dim: int = 64, pairing: str = "neox", quant: str = "fp8", scale_fmt: str = "ue8m0",
            block_size: int = 128, scale: float | None = None, causal: bool = True) -> NDArray[np.int64]:
    """The whole indexer: q [B, T, Hi, Di], k [B, S, Di], w [B, T, Hi], cos, sin
    [S, rope_dim/2] (row s: key position s; query t reads row t + S - T) -> idx
    [B, T, topk] (a set, as `select`)."""
    scores = indexer_scores(q, k, w, cos, sin, rope_dim=rope_dim, pairing=pairing, quant=quant,
                            scale_fmt=scale_fmt, block_size=block_size, scale=scale, causal=causal)
    return select(scores, topk=topk, causal=causal)


def indexer_scores(q: ArrayLike, k: ArrayLike, w: ArrayLike, cos: ArrayLike, sin: ArrayLike, *, rope_dim: int = 64,
                   pairing: str = "neox", quant: str = "fp8", scale_fmt: str = "ue8m0", block_size: int = 128,
                   scale: float | None = None, causal: bool = True) -> NDArray[np.float64]:
    """The scores I [B, T, S] `indexer` ranks: `index_scores` of the rotated (and, for
    quant "fp8", quantized and dequantized) q and k."""
    qs, ks = _indexer_qk(q, k, cos, sin, rope_dim, pairing, quant, scale_fmt, block_size, rotate)
    return index_scores(qs, ks, w, scale=scale, causal=causal)


def _indexer_qk(q, k, cos, sin, rope_dim, pairing, quant, scale_fmt, block_size, rot):
    quant = choice(quant, "quant", QUANTS)
    qf, kf = floats(q, "q", 4), floats(k, "k", 3)
    t, s = qf.shape[1], kf.shape[1]
    if t > s:
        raise ValueError(f"k: expected S >= T = {t} keys (queries sit at the last T positions), got {s}")
    r = _rope_dim(rope_dim, qf.shape[3])
    c, sn = _tables(cos, sin, s, r)
    fp8 = quant == "fp8"
    qr = rot(qf, c[s - t:], sn[s - t:], rope_dim=r, pairing=pairing, hadamard=fp8)  # [B, T, Hi, Di]
    kr = rot(kf[:, :, None], c, sn, rope_dim=r, pairing=pairing, hadamard=fp8)[:, :, 0]  # [B, S, Di]
    if not fp8:
        return qr, kr
    return _dequantize(qr, block_size, scale_fmt), _dequantize(kr, block_size, scale_fmt)


def emulate_indexer_scores(precision: str, q, k, w, cos, sin, *, rope_dim=64, pairing="neox", quant="fp8",
                           scale_fmt="ue8m0", block_size=128, scale=None, causal=True) -> NDArray[np.float64]:
    """The indexer's scores with the rotation at `precision` (`emulate_rotate`), the
    FP8 step exact on those values, the scores as `emulate_index_scores`: what a
    kernel at P ranks (the catalog checks its vectors' selections against it)."""
    def rot(x, c, s, **kw):
        return emulate_rotate(precision, x, c, s, **kw)
    qs, ks = _indexer_qk(q, k, cos, sin, rope_dim, pairing, quant, scale_fmt, block_size, rot)
    return emulate_index_scores(precision, qs, ks, w, scale=scale, causal=causal)
