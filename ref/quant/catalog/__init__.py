"""The quant area's catalog: gathers each technique module's OPERATIONS and FLAGS."""

from ref.quant.catalog import rtn, packing, awq, hqq
from ref.testing.catalog_types import gather
from ref.testing.flags import COMMON

MODULES = (rtn, packing, awq, hqq,)

OPERATIONS, FLAGS = gather("quant", MODULES, COMMON)
