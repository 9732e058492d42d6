"""The formats catalog (placeholder on this branch: the formats-element helper owns
this file and gathers every technique module, stochastic_rng included)."""

from ref.formats.ops import FLAGS, OPERATIONS

__all__ = ["FLAGS", "OPERATIONS"]
