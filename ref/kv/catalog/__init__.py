"""The kv area's catalog: gathers each technique module's OPERATIONS and FLAGS."""

from ref.kv.catalog import (kivi, kivi_cache, oscar, oscar_calibration, qjl, qjl_attend, qjl_outliers, turboquant,
                            turboquant_decode)
from ref.testing.catalog_types import gather
from ref.testing.flags import COMMON

MODULES = (kivi, kivi_cache, qjl, qjl_outliers, qjl_attend, turboquant, turboquant_decode, oscar_calibration, oscar)

OPERATIONS, FLAGS = gather("kv", MODULES, COMMON)
