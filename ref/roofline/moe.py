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

from collections.abc import Iterable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import choice, integer
from ref.roofline.config import Model
from ref.roofline.counting import at_least, counts
from ref.roofline.weights import KEEP, tensor_bytes, weight_table

__all__ = ["expected_experts", "moe_bytes_touched"]

_OP = "roofline.moe.expected_experts"


def expected_experts(experts: ArrayLike, top_k: ArrayLike, tokens: ArrayLike) -> NDArray[np.float64]:
    """The expected number of distinct experts `tokens` tokens touch, each routed to a
    uniform random `top_k`-subset of `experts` (elementwise; int64 arrays of one
    shape; experts >= 1, 0 <= top_k <= experts, tokens >= 0). tokens = 0 -> 0,
    tokens = 1 -> top_k exactly (log1p then expm1 may miss it by an ulp on some libms),
    top_k = experts -> experts (for tokens >= 1)."""
    e, k, b = (x.astype(np.int64) for x in counts(_OP, experts=experts, top_k=top_k, tokens=tokens).values())
    at_least(_OP, 1, experts=e)
    if np.any(k > e):
        raise ValueError(f"{_OP}: top_k: expected top_k <= experts, got top_k {int(k[k > e].flat[0])} "
                         f"with experts {int(e[k > e].flat[0])}")
    e_f, k_f, b_f = (x.astype(np.float64) for x in (e, k, b))
    with np.errstate(divide="ignore", invalid="ignore"):
        log_miss = np.log1p(-k_f / np.maximum(e_f, 1.0))  # log(1 - k/E): -inf when k = E
        t = np.where(b > 0, b_f * log_miss, 0.0)  # B log(1 - k/E); 0 * -inf avoided for B = 0
    out = e_f * np.abs(np.expm1(t))  # expm1(t) in [-1, 0]: abs, not negation, so B = 0 gives +0
    return np.where(b == 1, k_f, out)


def moe_bytes_touched(model: Model, batch: int, fmt: str = "bfloat16", *, keep: Iterable[str] = KEEP,
                      embedding: str = "rows") -> float:
    """Expected weight bytes one forward step of `batch` tokens reads, every tensor as
    `weight_table(model, fmt, keep=keep)` stores it: attention, norms, routers, shared
    experts, dense FFNs and the LM head whole; each MoE layer's routed experts
    expected_experts(E, k, batch) times one expert's bytes; the embedding table only
    the min(batch, vocab) rows looked up (embedding="rows"; "table" counts the whole
    table, as a whole-weights estimate does). A tied embedding is the LM head, read
    whole. A dense model is the case with no MoE layer."""
    batch = integer(batch, "batch", minimum=0)
    embedding = choice(embedding, "embedding", ("rows", "table"))
    total = 0.0
    for tensor, name, one in weight_table(model, fmt, keep=keep):
        if tensor.component == "experts":
            ffn = model.blocks[int(tensor.name.split(".")[1])].ffn  # "blocks.<i>.<matrix>"
            layers = tensor.count // ffn.experts
            touched = float(expected_experts(np.int64(ffn.experts), np.int64(ffn.top_k), np.int64(batch)))
            total += layers * touched * one
        elif tensor.component == "embedding" and embedding == "rows" and not model.tied_embeddings:
            rows = min(batch, tensor.rows)
            total += tensor.count * int(tensor_bytes(np.int64(rows), np.int64(tensor.cols), format=name))
        else:
            total += tensor.count * one
    return total
