"""Mixture-of-experts serving: how many distinct experts a batch touches, and the
weight bytes a decode step of a batch reads.

    expected_experts(E, k, B) = E * (1 - (1 - k/E)^B)

Each of B tokens routes to a uniformly random k-subset of the E experts, independently
of the others. Expert e is missed by one token with probability C(E-1, k)/C(E, k) =
1 - k/E, by all B with probability (1 - k/E)^B, so by linearity the expected number of
distinct experts touched is the sum over experts of 1 - (1 - k/E)^B. A token's k
experts are distinct (drawn without replacement): the per-expert miss probability is
1 - k/E, not (1 - 1/E)^k (which counts k independent draws that may repeat). The
bound min(E, k B) is reached only when no two picks collide; the mean is below it.
Real routers are not uniform (load imbalance, correlated tokens): this is the
independence baseline, the figure a capacity planner starts from.

Computed stably as E * -expm1(B * log1p(-k/E)): the plain power loses every digit
of (1 - k/E)^B's difference from 1 when k/E is below the float's epsilon.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.roofline.config import Model, MoE
from ref.roofline.operands import counts, same_shape
from ref.roofline.weights import tensor_bytes, weight_bytes

__all__ = ["expected_experts", "expert_bytes", "moe_bytes_touched"]

_OP = "roofline.moe.expected_experts"


def expected_experts(experts: ArrayLike, top_k: ArrayLike, tokens: ArrayLike) -> NDArray[np.float64]:
    """The expected number of distinct experts `tokens` tokens touch, each routed to a
    uniform random `top_k`-subset of `experts` (elementwise; int64 arrays of one
    shape; experts >= 1, 0 <= top_k <= experts, tokens >= 0). tokens = 0 -> 0,
    top_k = experts -> experts (for tokens >= 1)."""
    e, k, b = counts(_OP, experts=experts, top_k=top_k, tokens=tokens)
    same_shape(_OP, experts=e, top_k=k, tokens=b)
    if e.size and int(e.min()) < 1:
        raise ValueError(f"{_OP}: experts: expected at least 1 expert, got {int(e.min())}")
    if np.any(k > e):
        raise ValueError(f"{_OP}: top_k: expected top_k <= experts, got top_k {int(k[k > e].flat[0])} "
                         f"with experts {int(e[k > e].flat[0])}")
    e_f, k_f, b_f = (x.astype(np.float64) for x in (e, k, b))
    with np.errstate(divide="ignore", invalid="ignore"):
        log_miss = np.log1p(-k_f / np.maximum(e_f, 1.0))  # log(1 - k/E): -inf when k = E
        t = np.where(b > 0, b_f * log_miss, 0.0)  # B log(1 - k/E); 0 * -inf avoided for B = 0
    return e_f * np.abs(np.expm1(t))  # expm1(t) in [-1, 0]: abs, not negation, so B = 0 gives +0


def expert_bytes(ffn: MoE, hidden: int, fmt: str = "bfloat16") -> int:
    """Bytes of one routed expert's weight matrices at `fmt`: gate and up [I, hidden]
    (reduction over hidden) and down [hidden, I] (reduction over I); no gate for a
    non-gated expert."""
    inter = ffn.expert_intermediate
    up = int(tensor_bytes(np.int64(inter), np.int64(hidden), format=fmt))
    down = int(tensor_bytes(np.int64(hidden), np.int64(inter), format=fmt))
    return (2 if ffn.gated else 1) * up + down


def moe_bytes_touched(model: Model, batch: int, fmt: str = "bfloat16", *, embedding: str = "rows") -> float:
    """Expected weight bytes one forward step of `batch` tokens reads: every weight at
    `fmt` as `weight_bytes` stores it (attention, norms, router, shared experts, LM
    head, dense FFNs), but each MoE layer's routed experts only
    expected_experts(E, k, batch) times one expert's bytes, and the embedding table
    only the `batch` rows looked up (embedding="rows"; "table" counts the whole table,
    as a whole-weights estimate does). A tied embedding is read whole by the LM head.
    A dense model is the case with no MoE layer."""
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 0:
        raise ValueError(f"moe_bytes_touched: batch: expected a non-negative int, got {batch!r}")
    if embedding not in ("rows", "table"):
        raise ValueError(f"moe_bytes_touched: embedding: expected 'rows' or 'table', got {embedding!r}")
    total = float(weight_bytes(model, fmt))
    for block in model.blocks:
        if isinstance(block.ffn, MoE):
            one = expert_bytes(block.ffn, model.hidden, fmt)
            touched = float(expected_experts(np.int64(block.ffn.experts), np.int64(block.ffn.top_k),
                                             np.int64(batch)))
            total -= block.count * (block.ffn.experts - touched) * one
    if embedding == "rows" and not model.tied_embeddings:
        row = int(tensor_bytes(np.int64(1), np.int64(model.hidden), format="bfloat16"))
        total -= (model.vocab - min(int(batch), model.vocab)) * row
    return total
