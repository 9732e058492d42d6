"""The ssm area's ssd operations (spec/ssm.md). Filled in by the ssd work."""

from __future__ import annotations

__all__ = ["FLAGS", "OPERATIONS"]

FLAGS: dict = {}
OPERATIONS: list = []
