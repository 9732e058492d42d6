"""What the attention catalog's technique modules share: the area builder, the
bounds of the bounded rule (spec/attention.md, "Tolerance"), the LSE variant of
attend and attend_varlen, and a vector list to add to."""

from __future__ import annotations

from ref.attention.attend import SinkInLse
from ref.testing.bounded import Bound
from ref.testing.catalog_types import Area, Variant
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["ATTENTION", "LSE_BOUND", "OUT_BOUND", "OUT_LSE", "SINK_IN_LSE", "Vectors"]

ATTENTION = Area("attention", spec="spec/attention.md")

OUT_BOUND = Bound(k=2.0, floor=2.0, scale="relative")
LSE_BOUND = Bound(k=2.0, floor=2.0, scale="log")
OUT_LSE = {"out": OUT_BOUND, "lse": LSE_BOUND}  # attend, attend_varlen, mla

# The LSE's base (FlashInfer: 2) and FlashAttention-2's +inf for an empty row are
# options of the oracles, not catalog axes: an adapter converts (lse_from_base2).
SINK_IN_LSE = Variant("sink_in_lse", SinkInLse, SinkInLse.INCLUDED,
                      "whether the learnable sink's term is part of the returned LSE")


class Vectors(list):
    """An op's golden vectors, in order: `add(comment, flags, inputs, result, **params)`."""

    def add(self, comment: str, flags, inputs, result: str = "valid", **params) -> None:
        self.append(VectorSpec(comment, tuple(flags), Case(inputs, params), result))
