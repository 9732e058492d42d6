"""The ssm area's sizes operations (spec/ssm.md). Filled in by the sizes work."""

from __future__ import annotations

__all__ = ["FLAGS", "OPERATIONS"]

FLAGS: dict = {}
OPERATIONS: list = []
