"""The ssm area's mamba1 operations (spec/ssm.md). Filled in by the mamba1 work."""

from __future__ import annotations

__all__ = ["FLAGS", "OPERATIONS"]

FLAGS: dict = {}
OPERATIONS: list = []
