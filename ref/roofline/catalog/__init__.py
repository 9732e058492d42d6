"""The roofline area's catalog: gathers each technique module's OPERATIONS and FLAGS.

(A stand-in on the accounting branch, with its two modules only: the integrator's
version gathers every roofline catalog module.)"""

from ref.roofline.catalog import params, weights
from ref.testing.flags import COMMON

MODULES = (params, weights)

OPERATIONS = [op for module in MODULES for op in module.OPERATIONS]
FLAGS = {**COMMON, **{flag: note for module in MODULES for flag, note in module.FLAGS.items()}}
