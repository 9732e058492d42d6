"""What the specdec catalog modules share: the area (its dotted prefix and spec page)."""

from __future__ import annotations

from ref.testing.catalog_types import Area, Flag

__all__ = ["AREA", "ROW_SUM_FLAG"]

AREA = Area("specdec", spec="spec/specdec.md")

# one tolerance for the whole area (ref.specdec.rejection.SUM_TOLERANCE): every op's flag is this one
ROW_SUM_FLAG = Flag("probability rows checked against another tolerance than the spec's |sum - 1| <= 1e-4",
                    "valid float32 softmax rows are refused, or rows that are not distributions are sampled")
