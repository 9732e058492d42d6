"""What the ssm catalog modules share: the area (its dotted prefix and spec page)."""

from __future__ import annotations

from ref.testing.catalog_types import Area

__all__ = ["AREA"]

AREA = Area("ssm", spec="spec/ssm.md")
