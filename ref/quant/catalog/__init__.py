"""The quant area's catalog: gathers each technique module's OPERATIONS and FLAGS."""

from ref.quant.catalog import awq, gptq, hadamard, hqq, lattice, packing, rtn
from ref.testing.catalog_types import gather
from ref.testing.flags import COMMON

MODULES = (rtn, packing, gptq, awq, hqq, hadamard, lattice)

OPERATIONS, FLAGS = gather("quant", MODULES, COMMON)
