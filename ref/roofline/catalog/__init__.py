"""The roofline area's catalog: gathers each technique module's OPERATIONS and FLAGS
(one module per technique: params, weights, kv, flops, serving)."""

from ref.roofline.catalog import flops, kv, params, serving, weights
from ref.testing.flags import COMMON

MODULES = (params, weights, kv, flops, serving)

OPERATIONS = [op for module in MODULES for op in module.OPERATIONS]
FLAGS = {**COMMON, **{flag: note for module in MODULES for flag, note in module.FLAGS.items()}}
