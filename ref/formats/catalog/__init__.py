"""The formats area's catalog: gathers OPERATIONS and FLAGS from its technique modules.

Minimal, for the block formats' branch only (the element catalog writes the real one):
the element and packing ops still come from ref/formats/ops.py here."""

from ref.formats import ops as element_ops
from ref.formats.catalog import intgroup, layouts, mx, nvfp4

_MODULES = (element_ops, mx, nvfp4, intgroup, layouts)

OPERATIONS = [op for m in _MODULES for op in m.OPERATIONS]
FLAGS = {name: flag for m in _MODULES for name, flag in m.FLAGS.items()}
