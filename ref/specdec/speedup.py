"""The speed-up model of speculative decoding (spec/specdec.md, "The speed-up model").

    acceptance(p, q)     = sum_x min(p(x), q(x)) = 1 - TV(p, q)            (Leviathan et al., Thm 3.5)
    tokens per step      = sum_{i=0..k} alpha^i = (1 - alpha^(k+1)) / (1 - alpha)
                           (ref.roofline.specdec.expected_tokens: i.i.d. acceptances, the paper's Eq. 1)
    tokens, position-wise = 1 + sum_{i=1..k} a_0 a_1 ... a_{i-1}       (acceptances a_j that vary by position)

alpha is the probability that one drafted token is accepted, E over the context of
acceptance(p, q); a step emits N tokens, P(N = i + 1) = alpha^i (1 - alpha) for i < k and
P(N = k + 1) = alpha^k (`length_law`).

Wall clock, on the roofline (ref.roofline.perf): a step of `batch` sequences at `context`
tokens is k draft decode steps (the draft model's decode_step, or a fixed share `c` of the
target's one-token step) and one verification forward of the target over k + 1 tokens per
sequence (`verify_step`: batch (k + 1) tokens' FLOPs with logits at every position, the
weights read once, each sequence's KV cache read once). Without speculation one step emits
one token per sequence:

    speedup(batch) = tokens_per_step * T_target(1 token) / (k T_draft + T_verify(k + 1 tokens))

At small batch every term is memory-bound: T_verify = T_target(1 token) and the ratio is
Leviathan et al.'s Theorem 3.8, E / (k c + 1). As the batch grows the verification's
(k + 1)-fold FLOPs cross the ridge first (its intensity is k + 1 times the plain step's),
so it turns compute-bound and grows with the batch while the plain step is still
memory-bound: past `slowdown_batch` speculation is slower than plain decoding.
The k draft steps are counted at the same context (the k extra tokens of context are
not), and nothing else (sampling, the rejection kernel, scheduling) is counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import integer, real
from ref.roofline.config import Model
from ref.roofline.flops import forward_flops
from ref.roofline.kv import kv_bytes, state_bytes
from ref.roofline.moe import moe_bytes_touched
from ref.roofline.perf import PhaseEstimate, decode_step, estimate, max_batch
from ref.roofline.specdec import expected_tokens
from ref.specdec.rejection import SUM_TOLERANCE, check_distributions

__all__ = ["SpecStep", "acceptance", "length_law", "positionwise_tokens", "slowdown_batch", "spec_step",
           "tv_distance", "verify_step"]

ROW_SUM_TOLERANCE = SUM_TOLERANCE  # the area's one tolerance (ref.specdec.rejection)


def _rows(p: ArrayLike, q: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    out = []
    for name, a in (("p", p), ("q", q)):
        arr = np.asarray(a)
        if arr.dtype not in (np.float32, np.float64):
            raise TypeError(f"{name}: expected float32 or float64 probabilities, got {arr.dtype}")
        arr = arr.astype(np.float64)
        if arr.ndim < 1 or arr.shape[-1] < 1:
            raise ValueError(f"{name}: expected rows [..., V] with V >= 1, got shape {arr.shape}")
        out.append(check_distributions(arr, name))
    if out[0].shape != out[1].shape:
        raise ValueError(f"p, q: shapes {out[0].shape} and {out[1].shape} differ")
    return out[0], out[1]


def acceptance(p: ArrayLike, q: ArrayLike) -> NDArray[np.float64]:
    """The probability that a token drafted from q is accepted against the target p:
    sum_x q(x) min(1, p(x)/q(x)) = sum_x min(p(x), q(x)) (rows [..., V] -> [...])."""
    pp, qq = _rows(p, q)
    return np.minimum(pp, qq).sum(axis=-1)


def tv_distance(p: ArrayLike, q: ArrayLike) -> NDArray[np.float64]:
    """Total variation distance (1/2) sum_x |p(x) - q(x)| (rows [..., V] -> [...]);
    acceptance(p, q) = 1 - tv_distance(p, q)."""
    pp, qq = _rows(p, q)
    return 0.5 * np.abs(pp - qq).sum(axis=-1)


def positionwise_tokens(a: ArrayLike) -> NDArray[np.float64]:
    """Expected tokens of one step whose position j is accepted with probability a_j
    once reached (a [..., k] float64 in [0, 1] -> [...]): 1 + sum_i prod_{j<i} a_j.
    Equal acceptances give expected_tokens(alpha, k)."""
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim < 1 or np.any(~np.isfinite(arr)) or np.any((arr < 0) | (arr > 1)):
        raise ValueError("a: expected acceptance probabilities in [0, 1], shape [..., k]")
    return 1.0 + np.cumprod(arr, axis=-1).sum(axis=-1)


def length_law(alpha: float, k: int) -> NDArray[np.float64]:
    """P(a step emits i tokens) for i = 1 .. k + 1 (index i - 1), i.i.d. acceptances alpha."""
    alpha = real(alpha, "alpha", positive=False)
    k = integer(k, "k", minimum=0)
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha: expected an acceptance rate in [0, 1], got {alpha}")
    powers = alpha ** np.arange(k + 1, dtype=np.float64)
    law = powers * (1.0 - alpha)
    law[k] = powers[k]
    return law


def verify_step(model: Model, hw, context: int, batch: int = 1, tokens: int = 1, *, fmt: str | None = "bfloat16",
                weight_format: str = "bfloat16", kv_bits: int = 16, state_bits: int = 32,
                mla: str = "absorbed") -> PhaseEstimate:
    """The target's forward over `tokens` new tokens for each of `batch` sequences with
    `context` tokens cached, logits at every new position (the verification of tokens - 1
    drafts): FLOPs batch * forward_flops(tokens, context, lm_head="all"); bytes the weights
    batch * tokens tokens touch plus each sequence's KV cache and state, read once.
    tokens = 1 is decode_step's accounting."""
    context = integer(context, "context", minimum=0)
    batch = integer(batch, "batch", minimum=1)
    tokens = integer(tokens, "tokens", minimum=1)
    flops = batch * forward_flops(model, tokens, context, lm_head="all", mla=mla)
    per_sequence = kv_bytes(model, context, kv_bits) + state_bytes(model, state_bits)
    nbytes = moe_bytes_touched(model, batch * tokens, weight_format) + batch * per_sequence
    return estimate(flops, nbytes, hw, fmt, batch * tokens)


@dataclass(frozen=True)
class SpecStep:
    """One speculative step of a batch on the roofline: expected tokens per sequence, the
    draft's k steps, the verification, the plain one-token step, and the speed-up."""

    tokens: float
    draft_time: float
    verify: PhaseEstimate
    plain: PhaseEstimate
    speedup: float


def _draft_time(draft, hw, context: int, batch: int, k: int, plain: PhaseEstimate, fmt) -> float:
    if isinstance(draft, Model):
        return k * decode_step(draft, hw, context, batch, fmt=fmt).time
    c = real(draft, "draft", positive=False)
    if c < 0:
        raise ValueError(f"draft: expected a draft model or a non-negative cost ratio, got {c}")
    return k * c * plain.time


def spec_step(model: Model, hw, *, context: int, batch: int, k: int, alpha: float, draft, fmt: str = "bfloat16",
              **accounting) -> SpecStep:
    """The wall-clock model (module docstring) at one batch size. draft: the draft Model
    (its decode_step on the same hardware, k times), or a float c >= 0, the draft step's
    time over the target's one-token step at this batch."""
    k = integer(k, "k", minimum=0)
    plain = decode_step(model, hw, context, batch, fmt=fmt, **accounting)
    verify = verify_step(model, hw, context, batch, k + 1, fmt=fmt, **accounting)
    drafting = _draft_time(draft, hw, context, batch, k, plain, fmt)
    tokens = float(expected_tokens(np.float64(alpha), np.int64(k)))
    return SpecStep(tokens, drafting, verify, plain, tokens * plain.time / (drafting + verify.time))


def slowdown_batch(model: Model, hw, *, context: int, k: int, alpha: float, draft, fmt: str = "bfloat16",
                   limit: int | None = None, **accounting) -> int | None:
    """The smallest batch at which speculation is slower than plain decoding (speed-up
    below 1), searched up to `limit` (default: the sequences that fit, max_batch); None
    when it stays faster up to there. The speed-up falls with the batch once the
    verification is compute-bound; the search doubles, then bisects, and checks that the
    batch below the answer is still a speed-up."""
    limit = max_batch(model, hw, context) if limit is None else integer(limit, "limit", minimum=1)

    def slower(b: int) -> bool:
        return spec_step(model, hw, context=context, batch=b, k=k, alpha=alpha, draft=draft, fmt=fmt,
                         **accounting).speedup < 1.0

    if limit < 1:
        return None
    if slower(1):
        return 1
    lo, hi = 1, 2
    while hi < limit and not slower(hi):
        lo, hi = hi, min(2 * hi, limit)
    if not slower(hi):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if slower(mid) else (mid, hi)
    return hi
