"""The kv area's catalog: gathers each technique module's OPERATIONS and FLAGS."""

from ref.kv.catalog import qjl, qjl_outliers, turboquant
from ref.testing.catalog_types import gather
from ref.testing.flags import COMMON

MODULES = (qjl, qjl_outliers, turboquant)

OPERATIONS, FLAGS = gather("kv", MODULES, COMMON)
