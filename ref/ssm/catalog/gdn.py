"""The ssm area's gdn operations (spec/ssm.md). Filled in by the gdn work."""

from __future__ import annotations

__all__ = ["FLAGS", "OPERATIONS"]

FLAGS: dict = {}
OPERATIONS: list = []
