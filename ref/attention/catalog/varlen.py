"""attention.attend_varlen: attention over a packed batch of variable-length sequences.

  q [Tq, Hq, D], k [Tk, Hkv, D], v [Tk, Hkv, Dv], cu_seqlens_q, cu_seqlens_k [, sinks [Hq]]
  -> (out [Tq, Hq, Dv], lse [Hq, Tq])

Sequence s holds rows cu_seqlens_q[s]:cu_seqlens_q[s+1] and keys likewise; each is an
`attention.attend` call of its own (causal alignment and windows per sequence), with
the same options and the same variant.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from ref.attention import emulate
from ref.attention.attend import attend_varlen
from ref.attention.catalog.common import ATTENTION, OUT_LSE, SINK_IN_LSE, Vectors
from ref.testing import attention_cases
from ref.testing.attention_cases import attend_case_flags, grid, varlen_cases
from ref.testing.catalog_types import Flag, seed_for

__all__ = ["FLAGS", "OPERATIONS"]

FLAGS = {
    "Varlen": Flag("a packed batch with positions or causal alignment not reset per sequence",
                   "sequences after the first attend across their boundary or misalign their mask"),
}


def _varlen_vectors() -> Vectors:
    rng = np.random.default_rng(seed_for("attention.attend_varlen"))
    v = Vectors()
    add = v.add
    packed = partial(attention_cases.packed, rng)

    add("three sequences of different lengths, causal prefill (Lq == Lk each)", ["Varlen", "CausalAlignment"],
        packed([4, 1, 6], [4, 1, 6], 4, 2, 16), causal=True)
    add("decode batch: one query per sequence, contexts 5, 9, 2", ["Varlen", "CausalAlignment"],
        packed([1, 1, 1], [5, 9, 2], 4, 1, 16), causal=True)
    add("chunked prefill: Lq < Lk in every sequence, each aligned bottom-right on its own",
        ["Varlen", "CausalAlignment"], packed([3, 2], [7, 4], 2, 2, 8), causal=True)
    add("an empty sequence in the middle and one with no keys", ["Varlen", "EmptyInput", "EmptyRow"],
        packed([2, 0, 3], [3, 2, 0], 2, 2, 8), causal=False)
    add("varlen with a sliding window and sink tokens", ["Varlen", "Window", "SinkTokens"],
        packed([8, 6], [8, 6], 2, 1, 16), causal=True, window_left=2, sink_tokens=1)
    add("varlen with learnable sinks and soft-cap", ["Varlen", "LearnableSink", "Softcap"],
        {**packed([3, 4], [5, 4], 2, 2, 8, std=2.0), "sinks": grid(rng, (2,))}, causal=True, softcap=3.0)
    add("long sequences of 70, 130 and 1 tokens, causal", ["Varlen", "TileLoop"],
        packed([70, 130, 1], [70, 130, 1], 2, 1, 16), causal=True)
    add("long decode batch: contexts 90 and 200, window 64", ["Varlen", "TileLoop", "Window"],
        packed([1, 2], [90, 200], 4, 2, 16), causal=True, window_left=64)
    add("causal with more queries than keys in a sequence (5 over 3): its first 2 rows see no key",
        ["Varlen", "CausalAlignment", "EmptyRow"], packed([5, 2], [3, 4], 2, 1, 8), causal=True)
    add("learnable sinks on a sequence with queries but no keys: its LSE is the sink",
        ["Varlen", "LearnableSink", "EmptyRow"], {**packed([2, 3, 1], [3, 0, 2], 2, 2, 8), "sinks": grid(rng, (2,))})
    add("no sequences at all", ["EmptyInput"], packed([], [], 2, 2, 8))
    add("offsets not starting at 0", ["InvalidInput"],
        {**packed([2, 2], [2, 2], 2, 2, 8), "cu_seqlens_q": np.array([1, 2, 4], np.int32)}, result="invalid")
    add("offsets that decrease", ["InvalidInput"],
        {**packed([2, 2], [2, 2], 2, 2, 8), "cu_seqlens_k": np.array([0, 3, 2, 4], np.int32)}, result="invalid")
    add("last offset differs from the packed length", ["InvalidInput"],
        {**packed([2, 2], [2, 2], 2, 2, 8), "cu_seqlens_q": np.array([0, 2, 3], np.int32)}, result="invalid")
    return v


OPERATIONS = [
    ATTENTION.bounded(
        "attend_varlen", attend_varlen, anchor="attend_varlen",
        summary="attention over a packed batch of variable-length sequences -> (out, lse)",
        variants=(SINK_IN_LSE,), vectors=_varlen_vectors, examples=varlen_cases, outputs=("out", "lse"),
        emulate=emulate.attend_varlen, bounds=OUT_LSE, case_flags=attend_case_flags),
]
