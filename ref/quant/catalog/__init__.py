"""The quant area's catalog: gathers each technique module's OPERATIONS and FLAGS."""

from ref.quant.catalog import awq
from ref.testing.catalog_types import gather
from ref.testing.flags import COMMON

MODULES = (awq,)

OPERATIONS, FLAGS = gather("quant", MODULES, COMMON)
