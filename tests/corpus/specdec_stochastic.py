"""Samplers for `specdec.rejection_sample_rng`: speculative-decoding steps that draw
their own random numbers from a seed. A correct inverse-CDF sampler (uniforms from
Philox, the acceptance test u <= p/q as vLLM writes it), with switches for the bugs
real kernels have had, and the registry of those bugs.

Each sampler is `sampler(target_probs, draft_tokens, num_draft, greedy, draft_probs=None,
*, seed, draft)` -> output [B, k+1] int64.
"""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import numpy as np

from ref.conformance.adapters.numpy_specdec_rng import rejection_sample_rng as gumbel_pcg
from ref.specdec.marginals import check_step


def _inverse_cdf(weights: np.ndarray, u: np.ndarray, normalize: bool = True) -> np.ndarray:
    """Per row [B, V]: the first index whose cumulative (normalized) weight exceeds u; an
    u past the total (rounding, or an unnormalized row) takes the last positive entry."""
    c = np.cumsum(weights, axis=-1)
    if normalize:
        c = c / np.where(c[:, -1:] > 0, c[:, -1:], 1.0)
    index = (c <= u[:, None]).sum(axis=-1)
    last = weights.shape[-1] - 1 - np.argmax((weights > 0)[:, ::-1], axis=-1)
    return np.minimum(index, last)


def inverse_philox(target_probs, draft_tokens, num_draft, greedy, draft_probs=None, *, seed, draft="probs",
                   bug=None):
    """A correct step (bug=None), position by position over the batch, its inputs
    checked by the oracle's check_step. bug names one wrong kernel of the registry below."""
    p, x, n, g, q = check_step(target_probs, draft_tokens, num_draft, greedy, draft_probs, draft=draft)
    b, k1, v = p.shape
    rng = np.random.Generator(np.random.Philox(seed))
    sample = (~g) | (bug == "greedy sampled")
    out = np.full((b, k1), -1, dtype=np.int64)
    alive = np.ones(b, dtype=bool)
    rows = np.arange(b)
    shared = rng.random(b)
    spill = np.zeros(b, dtype=bool)  # off by one: the correction lands one position late
    spilled = np.full(b, -1, dtype=np.int64)
    for j in range(k1):
        with np.errstate(invalid="ignore"):
            pj = np.where((j <= n)[:, None], p[:, j], 0.0)
        out[spill, j] = spilled[spill]
        spill[:] = False
        bonus = alive & (n == j)
        row = np.maximum(n - 1, 0) if bug == "bonus from the last draft row" else n
        pb = np.nan_to_num(p[rows, row])
        if bug != "no bonus":
            out[bonus, j] = _inverse_cdf(pb, rng.random(b))[bonus]
        alive &= n > j
        if j == k1 - 1:
            break
        t = x[:, j]
        ti = t if bug == "padding read as the last token" else np.maximum(t, 0)
        at = (j + 1) % (k1 - 1) if bug == "draft probability of the next position" else j
        if q is None:
            qj = (np.arange(v) == t[:, None]).astype(np.float64)
        else:
            qj = np.nan_to_num(np.where((at < n)[:, None], q[:, at], 0.0))
        u = shared if bug == "one uniform per request" else rng.random(b)
        qt, pt = qj[rows, ti], pj[rows, ti]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(qt > 0, pt / np.where(qt > 0, qt, 1.0), np.inf if bug == "zero draft probability accepted"
                             else 0.0)
        if bug == "accept when p >= q, no coin":
            accept = pt >= qt
        else:
            accept = ratio >= u
        if bug != "padding read as the last token":
            accept &= t >= 0
        accept &= alive
        out[accept, j] = t[accept]
        reject = alive & ~accept
        if bug == "recovered token from the target":
            w = pj.copy()
        elif bug == "residual max(q - p, 0)":
            w = np.maximum(qj - pj, 0.0)
        else:
            w = np.maximum(pj - qj, 0.0)
        empty = ~(w > 0).any(axis=1)
        w = np.where(empty[:, None], pj, w)
        rec = _inverse_cdf(w, rng.random(b), normalize=bug != "residual not renormalized")
        if bug == "zero-mass residual gives token 0":
            rec = np.where(empty, 0, rec)
        if bug == "acceptance length off by one":
            out[reject, j] = t[reject]
            spill = reject & (j + 1 < k1)
            spilled = rec
        else:
            out[reject, j] = rec[reject]
        alive &= accept
    if (~sample).any():
        greedy_out = _greedy(p, x, n)
        out[~sample] = greedy_out[~sample]
    return out


def _greedy(p, x, n):
    b, k1, _ = p.shape
    best = np.argmax(np.nan_to_num(p), axis=-1)  # [B, k+1]
    keep = np.concatenate([x == best[:, :-1], np.zeros((b, 1), bool)], axis=1) & (np.arange(k1) < n[:, None])
    stop = np.argmin(keep, axis=1)
    return np.where(np.arange(k1) <= stop[:, None], best, -1)


def bug(name: str):
    return partial(inverse_philox, bug=name)


CORRECT = {
    "inverse CDF, Philox uniforms": inverse_philox,
    "Gumbel-max, PCG64 (the default kernel)": gumbel_pcg,
}

BOTH = {"draft": ["probs", "point_mass"]}

# name -> (sampler, declared variants, the flag of the vectors that must reject it without random
# examples: the corpus rule, checked in tests/test_specdec_statistical.py)
SPECDEC_RNG_BUGS = {
    "accept when p >= q, no coin": (bug("accept when p >= q, no coin"), BOTH, "RngCoin"),
    "residual not renormalized": (bug("residual not renormalized"), BOTH, "RngResidual"),
    "residual max(q - p, 0)": (bug("residual max(q - p, 0)"), {}, "RngResidual"),
    "recovered token from the target": (bug("recovered token from the target"), {}, "RngResidual"),
    "no bonus": (bug("no bonus"), BOTH, "RngBonus"),
    "bonus from the last draft row": (bug("bonus from the last draft row"), BOTH, "RngBonus"),
    "acceptance length off by one": (bug("acceptance length off by one"), BOTH, "RngLength"),
    "draft probability of the next position": (bug("draft probability of the next position"), {}, "RngPosition"),
    "greedy sampled": (bug("greedy sampled"), {}, "RngGreedy"),
    "one uniform per request": (bug("one uniform per request"), BOTH, "RngShared"),
    "padding read as the last token": (bug("padding read as the last token"), BOTH, "RngPadding"),
    "zero draft probability accepted": (bug("zero draft probability accepted"), {}, "RngZeroDraft"),
    "zero-mass residual gives token 0": (bug("zero-mass residual gives token 0"), {}, "RngZeroResidual"),
}


def implementation(op, sampler, variants=None) -> SimpleNamespace:
    """What the statistical judge asks of an implementation: its supported variant values
    (declared ones, the op's defaults elsewhere) and accepted dtypes (all)."""
    declared = variants or {}
    supported = {v.name: tuple(declared.get(v.name, (v.default,))) for v in op.variants}
    return SimpleNamespace(name=getattr(sampler, "__name__", "sampler"), fn=sampler,
                           supported=lambda _op: supported, accepted_dtypes=lambda _op: {})
