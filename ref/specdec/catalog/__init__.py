"""The specdec area's catalog: gathers each technique module's OPERATIONS and FLAGS."""

from ref.specdec.catalog import statistical, tree_sampling, trees
from ref.testing.catalog_types import gather
from ref.testing.flags import COMMON

MODULES = (statistical, trees, tree_sampling)

OPERATIONS, FLAGS = gather("specdec", MODULES, COMMON)
