"""The sparse area's nsa_select operations (spec/sparse.md)."""

from __future__ import annotations

__all__ = ["FLAGS", "OPERATIONS"]

FLAGS: dict = {}
OPERATIONS: list = []
