"""The kv area's catalog: gathers each technique module's OPERATIONS and FLAGS."""

from ref.kv.catalog import kivi, kivi_cache
from ref.testing.catalog_types import gather
from ref.testing.flags import COMMON

MODULES = (kivi, kivi_cache)

OPERATIONS, FLAGS = gather("kv", MODULES, COMMON)
