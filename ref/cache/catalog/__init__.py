"""The cache area's catalog: gathers each technique module's OPERATIONS and FLAGS."""

from ref.cache.catalog import block_manager, hashed, paged, paged_attention, radix
from ref.testing.catalog_types import gather
from ref.testing.flags import COMMON

MODULES = (paged, block_manager, paged_attention, hashed, radix)

OPERATIONS, FLAGS = gather("cache", MODULES, COMMON)
