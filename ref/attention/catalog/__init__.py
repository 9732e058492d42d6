"""The attention area's catalog: one module per technique (spec/attention.md)."""

from ref.attention.catalog import attend, merge, mla, rope, varlen
from ref.testing.catalog_types import gather
from ref.testing.flags import COMMON

MODULES = (attend, varlen, merge, rope, mla)

OPERATIONS, FLAGS = gather("attention", MODULES, COMMON)
