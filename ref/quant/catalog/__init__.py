"""The quant area's catalog: gathers each technique module's OPERATIONS and FLAGS."""

from ref.quant.catalog import gemm, gemm_fp, gptq, lattice, packing, rtn
from ref.testing.catalog_types import gather
from ref.testing.flags import COMMON

MODULES = (rtn, packing, gptq, lattice, gemm, gemm_fp)

OPERATIONS, FLAGS = gather("quant", MODULES, COMMON)
