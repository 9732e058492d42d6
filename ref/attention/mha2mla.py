"""MHA2MLA: a trained MHA/GQA attention layer turned into an MLA-style one
(Ji et al., "Towards Economical Inference: Enabling DeepSeek's Multi-Head Latent
Attention in Any Transformer-based LLMs", arXiv 2502.14837).

The layer: hidden states x [B, L, hidden], W_q [H*d, hidden], W_k and W_v [Hkv*d, hidden],
head h reads KV head g = h // (H / Hkv), NeoX RoPE: frequency pair f (f = 0..d/2-1,
f = 0 the fastest) is dims (f, f + d/2) and turns by base^(-2f/d) per position.

1. Partial RoPE. Per KV head g keep RoPE on p of the d/2 pairs (`select_rope_pairs`); the
   other dims become position-free (NoPE). The query heads of g keep the same pairs, so a
   kept pair still scores R_i q . R_j k and a dropped one q . k. Strategies (the paper's
   S_high, S_low, S_uniform, S_2-norm); the paper recommends S_2-norm, which ranks pair f
   of KV head g by the bound |<q_f, R k_f>| <= |q_f| |k_f| averaged over calibration
   tokens (`pair_scores`):

       score[g, f] = sum_{h in group g} mean_t |q_{t,h,f}| * mean_t |k_{t,g,f}|

   (|.| the 2-norm of the two dims of pair f; the means run over tokens separately, as the
   authors' 2_norm.py computes them) and keeps the p highest.
2. Joint low-rank KV (SVD_joint). Stack the NoPE rows of W_k (all KV heads) on W_v,
   W_kv = [W_k_nope; W_v] [Hkv*(d-2p) + Hkv*d, hidden], and truncate its SVD to rank r:
   W_kv ~ (U_r S_r) V_r^T, so W_dkv = V_r^T [r, hidden] (the latent c = W_dkv x is what is
   cached) and [W_uk; W_uv] = U_r S_r. The paper factors the weights alone (`svd="weights"`,
   the default); `svd="whitened"` is the activation-aware SVD-LLM variant the authors'
   repository later added (get_whiten_matrix.py): with X the calibration tokens and
   X^T X = L L^T, factor W_kv L and set W_dkv = V_r^T L^-1, which minimizes
   |X (W_kv - W_kv')^T|_F instead of |W_kv - W_kv'|_F.

Not modelled: projection biases (the repository keeps k/v biases on the
up-projections) and its `is_gqa2mha2mla` switch (GQA keys repeated to H heads first).

The converted layer caches, per token, the latent (r values) and the kept RoPE keys
(Hkv * 2p values) instead of 2 * Hkv * d. W_q and W_o are unchanged, so the forward
functions here stop before W_o: they return the per-head attention output
[B, L, H, d] and the LSE [B, H, L].
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import integer, member
from ref.attention.attend import attend
from ref.attention.checks import floats
from ref.attention.rope import apply_rope

__all__ = [
    "Selection",
    "SvdMethod",
    "ConvertedLayer",
    "convert",
    "converted_attention",
    "joint_svd",
    "kv_bytes_per_token",
    "original_attention",
    "pair_scores",
    "select_rope_pairs",
]

class Selection(Enum):
    """Which RoPE frequency pairs each KV head keeps (see `select_rope_pairs`)."""

    NORM2 = "2norm"
    HIGH = "high"
    LOW = "low"
    UNIFORM = "uniform"


class SvdMethod(Enum):
    """How `joint_svd` factors the stacked weights: alone, or whitened by activations."""

    WEIGHTS = "weights"
    WHITENED = "whitened"


class ConvertedLayer(NamedTuple):
    """The converted layer's weights (float64).

    w_q [H*d, hidden] (unchanged); keep [Hkv, d/2] bool, the pairs that keep RoPE;
    w_k_rope [Hkv, 2p, hidden], the rows of W_k at the kept dims in increasing order;
    w_dkv [r, hidden]; w_uk [Hkv, d-2p, r] (to the NoPE dims, increasing order);
    w_uv [Hkv, d, r]; n_heads H.
    """

    w_q: NDArray[np.float64]
    keep: NDArray[np.bool_]
    w_k_rope: NDArray[np.float64]
    w_dkv: NDArray[np.float64]
    w_uk: NDArray[np.float64]
    w_uv: NDArray[np.float64]
    n_heads: int


def _weights(w_q, w_k, w_v, n_heads):
    """The three projections as float64, and (H, Hkv, d, hidden)."""
    w_q, w_k, w_v = floats(w_q, "w_q", 2), floats(w_k, "w_k", 2), floats(w_v, "w_v", 2)
    h = integer(n_heads, "n_heads", minimum=1)
    if w_q.shape[0] % h or (w_q.shape[0] // h) % 2 or w_q.shape[0] == 0:
        raise ValueError(f"w_q: expected [H * d, hidden] with H = {h} and an even d >= 2, got shape {w_q.shape}")
    d, hidden = w_q.shape[0] // h, w_q.shape[1]
    hkv = w_k.shape[0] // d
    if w_k.shape[1] != hidden or w_k.shape[0] % d or hkv == 0 or h % hkv:
        raise ValueError(f"w_k: expected [Hkv * d, hidden] with d = {d}, hidden = {hidden} and Hkv dividing "
                         f"H = {h}, got shape {w_k.shape}")
    if w_v.shape != w_k.shape:
        raise ValueError(f"w_v: expected the shape of w_k {w_k.shape}, got {w_v.shape}")
    return w_q, w_k, w_v, (h, hkv, d, hidden)


def _pair_norms(y: NDArray[np.float64]) -> NDArray[np.float64]:
    """[..., d] -> [..., d/2]: the 2-norm of each NeoX pair (dims f and f + d/2)."""
    half = y.shape[-1] // 2
    return np.hypot(y[..., :half], y[..., half:])


def pair_scores(calibration: ArrayLike, w_q: ArrayLike, w_k: ArrayLike, *, n_heads: int) -> NDArray[np.float64]:
    """S_2-norm scores [Hkv, d/2] of the NeoX frequency pairs, from calibration tokens.

    calibration [N, hidden] (the layer's inputs); q = W_q x, k = W_k x before RoPE (a
    rotation keeps each pair's norm). score[g, f] = sum over the query heads h of group
    g of mean_t |q_{t,h,f}| * mean_t |k_{t,g,f}|.
    """
    w_q, w_k, _, (h, hkv, d, hidden) = _weights(w_q, w_k, w_k, n_heads)
    x = floats(calibration, "calibration", 2)
    if x.shape[1] != hidden or x.shape[0] == 0:
        raise ValueError(f"calibration: expected [N >= 1, hidden = {hidden}], got shape {x.shape}")
    q_norm = _pair_norms((x @ w_q.T).reshape(-1, h, d)).mean(axis=0)  # [H, d/2]
    k_norm = _pair_norms((x @ w_k.T).reshape(-1, hkv, d)).mean(axis=0)  # [Hkv, d/2]
    return q_norm.reshape(hkv, h // hkv, d // 2).sum(axis=1) * k_norm


def select_rope_pairs(rope_pairs: int, *, head_dim: int, n_kv_heads: int, selection: Selection | str = "2norm",
                      scores: ArrayLike | None = None, uniform_start: int = 0) -> NDArray[np.bool_]:
    """keep [Hkv, d/2]: True for the p = rope_pairs pairs of each KV head that keep RoPE.

    "high"     f < p (the fastest frequencies)
    "low"      f >= d/2 - p (the slowest)
    "uniform"  f = uniform_start + k * (d/2) / p, k = 0..p-1 (p must divide d/2 and
               0 <= uniform_start < (d/2) / p)
    "2norm"    the p highest `scores` [Hkv, d/2] per KV head (`pair_scores`); equal
               scores go to the faster pair (the lower f)
    """
    d = integer(head_dim, "head_dim", minimum=2)
    if d % 2:
        raise ValueError(f"head_dim: expected an even head dim, got {d}")
    half, hkv = d // 2, integer(n_kv_heads, "n_kv_heads", minimum=1)
    p = integer(rope_pairs, "rope_pairs", minimum=0, maximum=half)
    selection = member(selection, Selection, "selection")
    f = np.arange(half)
    if selection is Selection.HIGH:
        row = f < p
    elif selection is Selection.LOW:
        row = f >= half - p
    elif selection is Selection.UNIFORM:
        if p and half % p:
            raise ValueError(f"rope_pairs: 'uniform' needs it to divide d/2 = {half}, got {p}")
        step = half // p if p else half
        start = integer(uniform_start, "uniform_start", minimum=0, maximum=step - 1)
        row = (f % step == start) if p else np.zeros(half, bool)
    else:
        if scores is None:
            raise ValueError("scores: selection '2norm' needs the pair scores [Hkv, d/2] (see pair_scores)")
        s = floats(scores, "scores", 2)
        if s.shape != (hkv, half):
            raise ValueError(f"scores: expected [Hkv, d/2] = {(hkv, half)}, got {s.shape}")
        if not np.isfinite(s).all():
            raise ValueError("scores: expected finite scores")
        order = np.argsort(-s, axis=1, kind="stable")  # stable: ties to the lower f
        keep = np.zeros((hkv, half), bool)
        np.put_along_axis(keep, order[:, :p], True, axis=1)
        return keep
    return np.broadcast_to(row, (hkv, half)).copy()


def joint_svd(w_k_nope: ArrayLike, w_v: ArrayLike, rank: int, *, svd: SvdMethod | str = "weights",
              calibration: ArrayLike | None = None) -> tuple[NDArray, NDArray, NDArray]:
    """SVD_joint: [W_k_nope; W_v] ~ [W_uk; W_uv] W_dkv at rank r.

    w_k_nope [Rk, hidden], w_v [Rv, hidden]; returns W_dkv [r, hidden], W_uk [Rk, r],
    W_uv [Rv, r], with 1 <= r <= min(Rk + Rv, hidden). svd "weights" (the paper):
    W_dkv = V_r^T, [W_uk; W_uv] = U_r S_r of the stacked weights. "whitened":
    calibration [N, hidden] with X^T X positive definite, X^T X = L L^T; the same on
    W L, then W_dkv = V_r^T L^-1.
    """
    w_k_nope, w_v = floats(w_k_nope, "w_k_nope", 2), floats(w_v, "w_v", 2)
    if w_k_nope.shape[1] != w_v.shape[1]:
        raise ValueError(f"w_k_nope: expected [Rk, hidden] with hidden = {w_v.shape[1]} like w_v, "
                         f"got shape {w_k_nope.shape}")
    w = np.concatenate([w_k_nope, w_v])  # [Rk + Rv, hidden]
    r = integer(rank, "rank", minimum=1, maximum=min(w.shape))
    if member(svd, SvdMethod, "svd") is SvdMethod.WEIGHTS:
        u, s, vt = np.linalg.svd(w, full_matrices=False)
        w_dkv = vt[:r]
    else:
        if calibration is None:
            raise ValueError("calibration: svd 'whitened' needs calibration tokens [N, hidden]")
        x = floats(calibration, "calibration", 2)
        if x.shape[1] != w.shape[1]:
            raise ValueError(f"calibration: expected [N, hidden = {w.shape[1]}], got shape {x.shape}")
        try:
            chol = np.linalg.cholesky(x.T @ x)  # X^T X = L L^T, L lower
        except np.linalg.LinAlgError:
            raise ValueError(f"calibration: X^T X must be positive definite (N >= hidden tokens spanning the "
                             f"hidden space), got shape {x.shape}") from None
        u, s, vt = np.linalg.svd(w @ chol, full_matrices=False)
        w_dkv = np.linalg.solve(chol.T, vt[:r].T).T  # V_r^T L^-1
    up = u[:, :r] * s[:r]
    return w_dkv, up[: w_k_nope.shape[0]], up[w_k_nope.shape[0]:]


def _split_dims(keep: NDArray[np.bool_]) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """Per KV head, the kept (RoPE) dims and the NoPE dims, each in increasing order."""
    dims = np.concatenate([keep, keep], axis=1)  # [Hkv, d]: pair f is dims f and f + d/2
    order = np.argsort(~dims, axis=1, kind="stable")
    n = int(dims[0].sum())
    return order[:, :n], order[:, n:]


def _keep(keep, hkv: int, d: int) -> NDArray[np.bool_]:
    k = np.asarray(keep)
    if k.dtype != np.bool_:
        raise TypeError(f"keep: expected a bool array [Hkv, d/2], got {k.dtype}")
    if k.shape != (hkv, d // 2):
        raise ValueError(f"keep: expected [Hkv, d/2] = {(hkv, d // 2)}, got {k.shape}")
    counts = k.sum(axis=1)
    if hkv and (counts != counts[0]).any():
        raise ValueError(f"keep: every KV head must keep the same number of pairs, got {counts.tolist()}")
    return k


def convert(w_q: ArrayLike, w_k: ArrayLike, w_v: ArrayLike, keep: ArrayLike, rank: int, *, n_heads: int,
            svd: SvdMethod | str = "weights", calibration: ArrayLike | None = None) -> ConvertedLayer:
    """The MLA-style layer of an MHA/GQA layer: partial RoPE on `keep`, SVD_joint at `rank`.

    w_q [H*d, hidden], w_k and w_v [Hkv*d, hidden]; keep [Hkv, d/2] from
    `select_rope_pairs`; rank r in [1, min(Hkv*(2d-2p), hidden)]; svd and calibration
    as in `joint_svd`.
    """
    w_q, w_k, w_v, (h, hkv, d, hidden) = _weights(w_q, w_k, w_v, n_heads)
    keep = _keep(keep, hkv, d)
    rope_dims, nope_dims = _split_dims(keep)
    w_k = w_k.reshape(hkv, d, hidden)
    w_k_rope = np.take_along_axis(w_k, rope_dims[..., None], axis=1)  # [Hkv, 2p, hidden]
    w_k_nope = np.take_along_axis(w_k, nope_dims[..., None], axis=1)  # [Hkv, d - 2p, hidden]
    w_dkv, w_uk, w_uv = joint_svd(w_k_nope.reshape(-1, hidden), w_v, rank, svd=svd, calibration=calibration)
    return ConvertedLayer(w_q=w_q, keep=keep, w_k_rope=w_k_rope, w_dkv=w_dkv,
                          w_uk=w_uk.reshape(hkv, d - rope_dims.shape[1], rank), w_uv=w_uv.reshape(hkv, d, rank),
                          n_heads=h)


def _hidden(x, hidden: int) -> NDArray[np.float64]:
    x = floats(x, "x", 3)
    if x.shape[2] != hidden:
        raise ValueError(f"x: expected [B, L, hidden = {hidden}], got shape {x.shape}")
    return x


def _positions(positions, b: int, length: int):
    if positions is None:
        return np.arange(length)
    pos = np.asarray(positions)
    if pos.shape not in ((length,), (b, length)):
        raise ValueError(f"positions: expected [L] = ({length},) or [B, L] = {(b, length)}, got {pos.shape}")
    return pos


def _partial_rope(y, positions, keep, base):
    """NeoX RoPE with the original frequencies on the kept pairs of y [B, L, n, d]
    (keep [n, d/2]); the other dims pass through."""
    dims = np.concatenate([keep, keep], axis=1)  # [n, d]
    return np.where(dims, apply_rope(y, positions, base=base, style="neox"), y)


def original_attention(x: ArrayLike, w_q: ArrayLike, w_k: ArrayLike, w_v: ArrayLike, *, n_heads: int,
                       keep: ArrayLike | None = None, positions: ArrayLike | None = None,
                       rope_base: float = 10000.0, causal: bool = True,
                       scale: float | None = None) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The MHA/GQA layer before W_o: out [B, L, H, d], lse [B, H, L].

    x [B, L, hidden]; NeoX RoPE on every pair, or only on `keep` [Hkv, d/2] (the paper's
    intermediate partial-RoPE model); positions [L] or [B, L] (default 0..L-1); scale
    defaults to d^-1/2.
    """
    w_q, w_k, w_v, (h, hkv, d, hidden) = _weights(w_q, w_k, w_v, n_heads)
    x = _hidden(x, hidden)
    b, length, _ = x.shape
    pos = _positions(positions, b, length)
    keep = np.ones((hkv, d // 2), bool) if keep is None else _keep(keep, hkv, d)
    q = (x @ w_q.T).reshape(b, length, h, d)
    k = (x @ w_k.T).reshape(b, length, hkv, d)
    v = (x @ w_v.T).reshape(b, length, hkv, d)
    q = _partial_rope(q, pos, np.repeat(keep, h // hkv, axis=0), rope_base)  # head h uses KV head h // G's pairs
    k = _partial_rope(k, pos, keep, rope_base)
    return attend(q, k, v, scale=scale, causal=causal)


def converted_attention(x: ArrayLike, layer: ConvertedLayer, *, positions: ArrayLike | None = None,
                        rope_base: float = 10000.0, causal: bool = True,
                        scale: float | None = None) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The converted layer before W_o: out [B, L, H, d], lse [B, H, L].

    Cached per token: c = W_dkv x [r] and k_rope = W_k_rope x [Hkv, 2p]. Keys are
    k_nope = W_uk c on the NoPE dims and k_rope (rotated) on the kept ones; values
    W_uv c; queries W_q x with RoPE on their group's kept pairs.
    """
    if not isinstance(layer, ConvertedLayer):
        raise TypeError(f"layer: expected a ConvertedLayer (see convert), got {type(layer).__name__}")
    hkv, d = layer.w_uv.shape[0], layer.w_uv.shape[1]
    h, hidden = layer.n_heads, layer.w_q.shape[1]
    x = _hidden(x, hidden)
    b, length, _ = x.shape
    pos = _positions(positions, b, length)
    c = x @ layer.w_dkv.T  # [B, L, r]: the cached latent
    k_rope = np.einsum("blx,gpx->blgp", x, layer.w_k_rope)  # [B, L, Hkv, 2p]: cached too
    k_nope = np.einsum("blr,gnr->blgn", c, layer.w_uk)  # [B, L, Hkv, d - 2p]
    v = np.einsum("blr,gvr->blgv", c, layer.w_uv)  # [B, L, Hkv, d]
    rope_dims, nope_dims = _split_dims(layer.keep)
    k = np.empty((b, length, hkv, d))
    np.put_along_axis(k, np.broadcast_to(rope_dims, (b, length) + rope_dims.shape), k_rope, axis=3)
    np.put_along_axis(k, np.broadcast_to(nope_dims, (b, length) + nope_dims.shape), k_nope, axis=3)
    q = (x @ layer.w_q.T).reshape(b, length, h, d)
    q = _partial_rope(q, pos, np.repeat(layer.keep, h // hkv, axis=0), rope_base)
    k = _partial_rope(k, pos, layer.keep, rope_base)
    return attend(q, k, v, scale=scale, causal=causal)


def kv_bytes_per_token(*, head_dim: int, n_kv_heads: int, rope_pairs: int, rank: int,
                       bits_per_value: int = 16) -> dict[str, float]:
    """KV-cache bytes one token adds to one layer, before and after conversion.

    original   2 * Hkv * d values (K and V)
    converted  r + Hkv * 2p values (the latent and the kept RoPE keys)
    each times bits_per_value / 8. Llama2-7B (d = 128, Hkv = 32) with 16 RoPE dims per
    head (p = 8) and d_kv = 64 per head (r = 2048): 16384 -> 5120 bytes in 16 bits
    (-68.75%), 1280 with a 4-bit KV cache (-92.19%, the paper's headline figure).
    """
    d = integer(head_dim, "head_dim", minimum=2)
    hkv = integer(n_kv_heads, "n_kv_heads", minimum=1)
    p = integer(rope_pairs, "rope_pairs", minimum=0, maximum=d // 2)
    r = integer(rank, "rank", minimum=1)
    bits = integer(bits_per_value, "bits_per_value", minimum=1)
    return {"original": 2 * hkv * d * bits / 8, "converted": (r + hkv * 2 * p) * bits / 8}
