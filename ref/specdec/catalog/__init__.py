"""The specdec area's catalog: gathers each technique module's OPERATIONS and FLAGS."""

from ref.specdec.catalog import rejection, statistical, tree_sampling, trees, typical
from ref.testing.catalog_types import gather
from ref.testing.flags import COMMON

MODULES = (rejection, statistical, trees, tree_sampling, typical)

OPERATIONS, FLAGS = gather("specdec", MODULES, COMMON)
