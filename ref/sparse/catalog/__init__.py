"""The sparse area's catalog: gathers each technique module's OPERATIONS and FLAGS."""

from ref.sparse.catalog import block, dsa, moba, nsa, nsa_select, traffic
from ref.testing.catalog_types import gather
from ref.testing.flags import COMMON

MODULES = (block, nsa_select, nsa, moba, dsa, traffic)

OPERATIONS, FLAGS = gather("sparse", MODULES, COMMON)
