"""The formats area's catalog: gathers each technique module's OPERATIONS and FLAGS."""

from ref.formats.catalog import element, intgroup, layouts, mx, nvfp4, packing, stochastic, stochastic_rng
from ref.testing.catalog_types import gather
from ref.testing.flags import COMMON

MODULES = (element, packing, stochastic, stochastic_rng, mx, nvfp4, intgroup, layouts)

OPERATIONS, FLAGS = gather("formats", MODULES, COMMON)
