"""Computational invariance (QuaRot, SpinQuant; spec/quant.md#rotation): a Llama block
computes the same function after its RMSNorm scales are folded into the next linears,
its residual stream is rotated by an orthogonal Q, and Hadamard rotations are added
inside it (online on the activations, offline in the weights), which is what lets
a rotated model be quantized with fewer outliers.

Row convention throughout: a linear is y = x W^T with W [out, in]; a rotation of
the stream is x -> x Q. For orthogonal Q, (x Q)(W Q)^T = x W^T, so

  fold_norms      W <- W diag(g) for the linears after an RMSNorm of weight g; g <- 1
                  (RMSNorm with unit weight commutes with Q: ||x Q|| = ||x||)
  rotate_block    inputs of wq, wk, wv, w_gate, w_up: W <- W Q; outputs of wo, w_down: W <- Q^T W
                  down_proj (R4):     online h -> H h (hadamard_transform), w_down <- w_down H^T
                  values, heads (R2): wv <- H_d wv per KV head (offline), online over the heads
                                      before wo, wo <- wo (H_heads (x) H_d)^T
                  queries, keys (R3): online H_d after RoPE on both (q k^T unchanged)

Block (float64): h = x + wo(attn(rope(wq n1), rope(wk n1), wv n1)); y = h + w_down(silu(w_gate n2) * w_up n2),
n1 = rmsnorm(x), n2 = rmsnorm(h), causal attention with GQA (n_heads / n_kv_heads
query heads per KV head), RoPE rotate-half with base 10000.

Also the measurements: `kurtosis` and the error of round-to-nearest before and after
a rotation. Reference: QuaRot arXiv:2404.00456 (sections 4-5), SpinQuant
arXiv:2405.16406 (R1-R4), SliceGPT arXiv:2401.15024 (computational invariance).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import integer
from ref.quant.hadamard import hadamard_matrix, hadamard_transform

__all__ = ["fold_norms", "kurtosis", "llama_block", "random_block", "random_orthogonal", "rms_norm",
           "rotate_block", "rtn_error"]

Params = Mapping[str, NDArray[np.float64]]
Online = Mapping[str, Callable[[NDArray[np.float64]], NDArray[np.float64]]]
_INPUT_SIDE = ("wq", "wk", "wv", "w_gate", "w_up")
_OUTPUT_SIDE = ("wo", "w_down")


def rms_norm(x: ArrayLike, weight: ArrayLike, eps: float = 1e-6) -> NDArray[np.float64]:
    """x / sqrt(mean(x^2) + eps) * weight over the last axis."""
    x = np.asarray(x, np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * np.asarray(weight, np.float64)


def _rope(x: NDArray[np.float64], base: float = 10000.0) -> NDArray[np.float64]:
    """Rotate-half RoPE at positions 0..T-1. x [T, H, D]."""
    t, _, d = x.shape
    inv_freq = base ** (-np.arange(0, d, 2) / d)  # [D/2]
    angle = np.arange(t)[:, None, None] * inv_freq  # [T, 1, D/2]
    cos, sin = np.cos(angle), np.sin(angle)
    a, b = x[..., :d // 2], x[..., d // 2:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def _identity(v: NDArray[np.float64]) -> NDArray[np.float64]:
    return v


def llama_block(x: ArrayLike, params: Params, *, n_heads: int, n_kv_heads: int,
                online: Online | None = None) -> NDArray[np.float64]:
    """One Llama decoder block on x [T, d] (one sequence, causal), float64. `online`
    maps "qk" (q, k [T, H, D] after RoPE), "o" (attention output [T, H * D] before wo)
    and "down" (the MLP's hidden [T, f] before w_down) to functions applied there."""
    online = dict(online or {})
    qk, o_in, down = (online.get(k, _identity) for k in ("qk", "o", "down"))
    x = np.asarray(x, np.float64)
    t = x.shape[0]
    n_heads, n_kv_heads = integer(n_heads, "n_heads", minimum=1), integer(n_kv_heads, "n_kv_heads", minimum=1)
    hd = params["wq"].shape[0] // n_heads
    n1 = rms_norm(x, params["attn_norm"])
    q = qk(_rope((n1 @ params["wq"].T).reshape(t, n_heads, hd)))  # [T, H, D]
    k = qk(_rope((n1 @ params["wk"].T).reshape(t, n_kv_heads, hd)))  # [T, Hkv, D]
    v = (n1 @ params["wv"].T).reshape(t, n_kv_heads, hd)  # [T, Hkv, D]
    group = n_heads // n_kv_heads
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)  # [T, H, D]: query head h reads KV head h // group
    scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd)  # [H, T, T]
    scores = np.where(np.tril(np.ones((t, t), bool)), scores, -np.inf)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    attn = np.einsum("hts,shd->thd", p, v).reshape(t, n_heads * hd)  # [T, H * D]
    h = x + o_in(attn) @ params["wo"].T
    n2 = rms_norm(h, params["mlp_norm"])
    gate = n2 @ params["w_gate"].T  # [T, f]
    hidden = gate / (1 + np.exp(-gate)) * (n2 @ params["w_up"].T)
    return h + down(hidden) @ params["w_down"].T


def fold_norms(params: Params) -> dict[str, NDArray[np.float64]]:
    """The RMSNorm weights folded into the linears that read them; the norms become 1."""
    out = dict(params)
    for name in ("wq", "wk", "wv"):
        out[name] = params[name] * params["attn_norm"][None, :]
    for name in ("w_gate", "w_up"):
        out[name] = params[name] * params["mlp_norm"][None, :]
    out["attn_norm"], out["mlp_norm"] = np.ones_like(params["attn_norm"]), np.ones_like(params["mlp_norm"])
    return out


def rotate_block(params: Params, q: ArrayLike, *, n_heads: int, n_kv_heads: int,
                 source: str = "quarot") -> tuple[dict[str, NDArray[np.float64]], dict[str, Callable]]:
    """The folded block's weights with the residual stream rotated by the orthogonal q
    [d, d] and the Hadamard rotations R2, R3, R4 added, and the online transforms the
    rotated block must run: llama_block(x q, new, online=online) = llama_block(x, params) q."""
    q = np.asarray(q, np.float64)
    out = {k: np.asarray(v, np.float64) for k, v in params.items()}
    if not (np.allclose(out["attn_norm"], 1) and np.allclose(out["mlp_norm"], 1)):
        raise ValueError("params: fold the norms first (fold_norms): RMSNorm weights must be 1")
    for name in _INPUT_SIDE:
        out[name] = out[name] @ q
    for name in _OUTPUT_SIDE:
        out[name] = q.T @ out[name]
    hd = out["wq"].shape[0] // n_heads
    # R4: h -> H h before down_proj, w_down <- w_down H^T (each row transformed)
    out["w_down"] = hadamard_transform(out["w_down"], source=source)
    # R2: each KV head's value rows rotated by H_d, then online H over the heads before wo
    wv = out["wv"].reshape(n_kv_heads, hd, -1)  # [Hkv, D, d]
    out["wv"] = np.einsum("ij,gjc->gic", hadamard_matrix(hd, source=source), wv).reshape(n_kv_heads * hd, -1)
    m = np.kron(hadamard_matrix(n_heads, source=source), hadamard_matrix(hd, source=source))  # [H D, H D]
    out["wo"] = out["wo"] @ m.T

    def heads(a: NDArray[np.float64]) -> NDArray[np.float64]:  # [T, H * D]: H over the head index
        t = a.shape[0]
        return hadamard_transform(a.reshape(t, n_heads, hd).swapaxes(1, 2), source=source).swapaxes(1, 2).reshape(t, -1)

    online = {"qk": lambda a: hadamard_transform(a, source=source), "o": heads,
              "down": lambda a: hadamard_transform(a, source=source)}
    return out, online


def random_orthogonal(rng: np.random.Generator, d: int) -> NDArray[np.float64]:
    """A Haar-random orthogonal [d, d] (QR of a Gaussian, column signs fixed by R's diagonal)."""
    a, r = np.linalg.qr(rng.standard_normal((d, d)))
    return a * np.sign(np.diag(r))


def random_block(rng: np.random.Generator, *, d: int, n_heads: int, n_kv_heads: int, f: int) -> dict:
    """Random block weights (RMSNorm weights away from 1, so folding matters)."""
    hd = d // n_heads

    def lin(o, i):
        return rng.standard_normal((o, i)) / np.sqrt(i)

    return {"attn_norm": 0.5 + rng.random(d), "mlp_norm": 0.5 + rng.random(d), "wq": lin(n_heads * hd, d),
            "wk": lin(n_kv_heads * hd, d), "wv": lin(n_kv_heads * hd, d), "wo": lin(d, n_heads * hd),
            "w_gate": lin(f, d), "w_up": lin(f, d), "w_down": lin(d, f)}


def kurtosis(x: ArrayLike) -> float:
    """Pearson's kurtosis E[(x - mean)^4] / var^2 of all of x's entries (3 for a Gaussian)."""
    x = np.asarray(x, np.float64).ravel()
    c = x - x.mean()
    return float(np.mean(c ** 4) / np.mean(c ** 2) ** 2)


def rtn_error(w: ArrayLike, *, bits: int = 4, group: int = 128) -> float:
    """||W - RTN(W)||_F / ||W||_F for symmetric round-to-nearest with scale amax / (2^(b-1) - 1)
    per group of `group` consecutive input channels (the measurement's quantizer)."""
    w = np.asarray(w, np.float64)
    g = w.reshape(w.shape[0], -1, group)  # [out, groups, group]
    qmax = 2 ** (integer(bits, "bits", minimum=2) - 1) - 1
    scale = np.abs(g).max(axis=-1, keepdims=True) / qmax
    scale = np.where(scale == 0, 1.0, scale)
    deq = np.clip(np.round(g / scale), -qmax, qmax) * scale
    return float(np.linalg.norm(deq - g) / np.linalg.norm(g))
