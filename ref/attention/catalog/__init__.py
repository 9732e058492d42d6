"""The attention area's catalog: one module per technique (spec/attention.md)."""

from ref.attention.catalog import attend, merge, mla, rope, varlen
from ref.testing.flags import COMMON

OPERATIONS = [*attend.OPERATIONS, *varlen.OPERATIONS, *merge.OPERATIONS, *rope.OPERATIONS, *mla.OPERATIONS]
FLAGS = {**COMMON, **attend.FLAGS, **varlen.FLAGS, **merge.FLAGS, **rope.FLAGS, **mla.FLAGS}
