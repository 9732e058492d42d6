"""The ssm area's catalog: gathers each technique module's OPERATIONS and FLAGS."""

from ref.ssm.catalog import gdn, mamba1, sizes, ssd
from ref.testing.catalog_types import gather
from ref.testing.flags import COMMON

MODULES = (ssd, mamba1, gdn, sizes)

OPERATIONS, FLAGS = gather("ssm", MODULES, COMMON)
