"""The sparse area's dsa operations (spec/sparse.md)."""

from __future__ import annotations

__all__ = ["FLAGS", "OPERATIONS"]

FLAGS: dict = {}
OPERATIONS: list = []
