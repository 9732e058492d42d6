"""The roofline area's catalog: gathers each technique module's OPERATIONS and FLAGS
(one module per technique: params, weights, kv, flops, serving)."""

from ref.roofline.catalog import flops, kv, params, serving, weights
from ref.testing.catalog_types import gather
from ref.testing.flags import COMMON

MODULES = (params, weights, kv, flops, serving)

OPERATIONS, FLAGS = gather("roofline", MODULES, COMMON)
