"""Split-KV attention and the merging of partial results (Flash-Decoding; FlashInfer's
cascade), proven equal to `attend`.

The keys are cut into ranges, each range gives a partial (o_i, lse_i), and
`merge_states` combines two partials over disjoint key sets:

    m   = max(lse_a, lse_b)
    w_x = exp(lse_x - m)
    o   = (w_a o_a + w_b o_b) / (w_a + w_b),   lse = m + log(w_a + w_b)

An empty partial has lse = -inf and contributes nothing; merging two empty ones
gives o = 0, lse = -inf (the formula alone gives NaN). Merging is commutative and
associative up to rounding, so any split and any merge order give `attend`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import member
from ref.attention.attend import LseBase, SinkInLse, attend, lse_from_base2, lse_to_base2, lse_variants, prepare
from ref.attention.checks import FLOATS

__all__ = ["attend_split", "merge_states", "merge_states_many", "split_partials", "state"]


def state(o: ArrayLike, lse: ArrayLike, name: str) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """A checked partial: o [..., Dv] and lse [...] float arrays of one leading shape,
    no +inf LSE; as float64. `name` ("a", "b") names the arguments o_a, lse_a, ..."""
    o, lse = np.asarray(o), np.asarray(lse)
    for arr, what in ((o, f"o_{name}"), (lse, f"lse_{name}")):
        if arr.dtype.name not in FLOATS:
            raise TypeError(f"{what}: expected a float array, got {arr.dtype}")
    if o.ndim < 1 or o.shape[:-1] != lse.shape:
        raise ValueError(f"o_{name}, lse_{name}: expected o [..., Dv] and lse [...] with the same leading shape, "
                         f"got {o.shape} and {lse.shape}")
    lse = lse.astype(np.float64)
    if np.any(lse == np.inf):
        raise ValueError(f"lse_{name}: +inf is not a log-sum-exp (an empty partial is -inf; "
                         "map FlashAttention-2's +inf first)")
    return o.astype(np.float64), lse


def merge_states(
    o_a: ArrayLike, lse_a: ArrayLike, o_b: ArrayLike, lse_b: ArrayLike, *, lse_base: LseBase | str = "e"
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Combine two attention partials over disjoint key sets (float64).

    o_* [..., Dv], lse_* [...] (natural log; `lse_base="2"` takes and returns
    FlashInfer's base-2 values). Returns (o, lse) of the union of the key sets.
    """
    base2 = member(lse_base, LseBase, "lse_base") is LseBase.TWO
    o_a, lse_a = state(o_a, lse_a, "a")
    o_b, lse_b = state(o_b, lse_b, "b")
    if o_a.shape != o_b.shape:
        raise ValueError(f"o_b: expected shape {o_a.shape} like o_a, got {o_b.shape}")
    if base2:
        lse_a, lse_b = lse_from_base2(lse_a), lse_from_base2(lse_b)
    with np.errstate(invalid="ignore"):
        m = np.maximum(lse_a, lse_b)
        shift = np.where(m == -np.inf, 0.0, m)
        w_a, w_b = np.exp(lse_a - shift), np.exp(lse_b - shift)
        total = w_a + w_b
        safe = np.where(total > 0, total, 1.0)
        o = np.where(total[..., None] > 0, (w_a[..., None] * o_a + w_b[..., None] * o_b) / safe[..., None], 0.0)
        o = np.where(np.isnan(total)[..., None], np.nan, o)
        lse = np.where(total > 0, shift + np.log(safe), -np.inf)
        lse = np.where(np.isnan(total), np.nan, lse)
    return o, lse_to_base2(lse) if base2 else lse


def merge_states_many(os: Sequence[ArrayLike], lses: Sequence[ArrayLike], *, lse_base: LseBase | str = "e"):
    """Fold `merge_states` over a list of partials, left to right (none: an error)."""
    if len(os) != len(lses) or not os:
        raise ValueError(f"os, lses: expected equally many partials, at least one; got {len(os)} and {len(lses)}")
    o, lse = state(os[0], lses[0], "a")
    for o_i, lse_i in zip(os[1:], lses[1:]):
        o, lse = merge_states(o, lse, o_i, lse_i, lse_base=lse_base)
    return o, lse


def _ranges(splits, lk: int) -> list[tuple[int, int]]:
    """Key ranges from a split count (near-equal ranges, as Flash-Decoding) or from
    explicit interior boundaries."""
    if isinstance(splits, (int, np.integer)) and not isinstance(splits, bool):
        if splits < 1:
            raise ValueError(f"splits: expected a positive count, got {splits}")
        edges = [round(i * lk / splits) for i in range(splits + 1)]
    else:
        inner = [int(x) for x in splits]
        edges = [0, *inner, lk]
        if any(b < a for a, b in zip(edges, edges[1:])):
            raise ValueError(f"splits: expected non-decreasing boundaries within [0, {lk}], got {inner}")
    return list(zip(edges, edges[1:]))


def split_partials(q, k, v, *, splits=2, sinks=None, mask=None, scale=None, causal=False, window_left=-1,
                   window_right=-1, sink_tokens=0, softcap=0.0, **variants
                   ) -> list[tuple[NDArray[np.float64], NDArray[np.float64]]]:
    """The partial (o, lse) of each key range (a learnable sink is a partial of its
    own: o = 0, lse = sink). Every mask keeps the key positions of the whole call;
    lse layout [B, Lq, Hq] (row-aligned with o [B, Lq, Hq, Dv], for merging).
    `variants` (sink_in_lse, lse_base, masked_lse) are checked, not applied."""
    member(variants.pop("sink_in_lse", "included"), SinkInLse, "sink_in_lse")
    lse_variants(np.zeros(0), **variants)
    q, k, v, sinks, scale, softcap, visible = prepare(
        q, k, v, sinks=sinks, mask=mask, scale=scale, causal=causal, window_left=window_left,
        window_right=window_right, sink_tokens=sink_tokens, softcap=softcap)
    parts = []
    for a, b in _ranges(splits, k.shape[1]):  # the range's keys, each row seeing what it sees in the whole
        o, lse = attend(q, k[:, a:b], v[:, a:b], mask=visible[..., a:b], scale=scale, softcap=softcap)
        parts.append((o, lse.transpose(0, 2, 1)))
    if sinks is not None:
        b_, lq, hq, _ = q.shape
        parts.append((np.zeros((b_, lq, hq, v.shape[3])), np.broadcast_to(sinks, (b_, lq, hq)).copy()))
    return parts


def attend_split(q, k, v, *, splits=2, **options) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """`attend` computed as split-KV partials merged by `merge_states` (float64).
    The LSE variants apply to the merged result; `sink_in_lse="excluded"` merges
    the key partials alone for the LSE."""
    sink_in_lse = member(options.get("sink_in_lse", "included"), SinkInLse, "sink_in_lse")
    parts = split_partials(q, k, v, splits=splits, **options)
    o, lse = merge_states_many([p[0] for p in parts], [p[1] for p in parts])
    if options.get("sinks") is not None and sink_in_lse is SinkInLse.EXCLUDED:
        _, lse = merge_states_many([p[0] for p in parts[:-1]], [p[1] for p in parts[:-1]])
    lse = np.ascontiguousarray(lse.transpose(0, 2, 1))
    return o, lse_variants(lse, lse_base=options.get("lse_base", "e"), masked_lse=options.get("masked_lse", "-inf"))
