"""What the roofline catalog modules share: the area (its dotted prefix and spec page)
and the flags more than one op's vectors carry, each explained once."""

from __future__ import annotations

from ref.testing.catalog_types import Area, Flag

__all__ = ["AREA", "SHARED_FLAGS"]

AREA = Area("roofline", spec="spec/roofline.md")

SHARED_FLAGS = {
    "GQA": Flag("k and v (their projections, cache or state) sized by the query heads where the KV heads are fewer",
                "MHA's size reported for a GQA model: k and v counted heads/kv_heads times too large"),
    "Int64": Flag("a count computed in int32 or float64 (wraps past 2^31, rounds past 2^53)",
                  "a large model's count wraps negative or loses its last digits"),
    "CeilOnce": Flag("bits rounded up to bytes per element, row, block, token, layer or head, then summed, instead "
                     "of once over the whole quantity",
                     "sub-byte formats come out too large: an odd 4-bit row gains half a byte, a 3-bit cache a byte "
                     "per layer"),
}
