"""The formats area's catalog: gathers each technique module's OPERATIONS and FLAGS."""

from ref.formats import ops as unmoved  # TRANSITIONAL: MX, NVFP4, INT groups, layouts until their modules land here
from ref.formats.catalog import element, packing, stochastic
from ref.testing.flags import COMMON

# >>> stochastic_rng (the statistical twin of encode_stochastic) joins MODULES here:
# import it above and add it to the tuple.
MODULES = (element, packing, stochastic)

OPERATIONS = [op for module in MODULES for op in module.OPERATIONS] + unmoved.OPERATIONS
FLAGS = {**COMMON, **{flag: note for module in MODULES for flag, note in module.FLAGS.items()}, **unmoved.FLAGS}
