"""The formats area's catalog: gathers each technique module's OPERATIONS and FLAGS."""

from ref.formats.catalog import element, intgroup, layouts, mx, nvfp4, packing, stochastic, stochastic_rng
from ref.testing.flags import COMMON

MODULES = (element, packing, stochastic, stochastic_rng, mx, nvfp4, intgroup, layouts)

OPERATIONS = [op for module in MODULES for op in module.OPERATIONS]
FLAGS = {**COMMON, **{flag: note for module in MODULES for flag, note in module.FLAGS.items()}}
