"""The kv area's catalog: gathers each technique module's OPERATIONS and FLAGS."""

from ref.kv.catalog import oscar, oscar_calibration
from ref.testing.catalog_types import gather
from ref.testing.flags import COMMON

MODULES = (oscar, oscar_calibration)

OPERATIONS, FLAGS = gather("kv", MODULES, COMMON)
