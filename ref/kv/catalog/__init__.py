"""The kv area's catalog: gathers each technique module's OPERATIONS and FLAGS."""

from ref.kv.catalog import turboquant
from ref.testing.catalog_types import gather
from ref.testing.flags import COMMON

MODULES = (turboquant,)

OPERATIONS, FLAGS = gather("kv", MODULES, COMMON)
