"""The cache area's catalog: gathers each technique module's OPERATIONS and FLAGS."""

from ref.cache.catalog import block_manager, hashed, paged, paged_attention, radix
from ref.testing.flags import COMMON

MODULES = (paged, block_manager, paged_attention, hashed, radix)

OPERATIONS = [op for module in MODULES for op in module.OPERATIONS]
FLAGS = dict(COMMON)
for _module in MODULES:
    for _flag, _note in _module.FLAGS.items():
        if FLAGS.setdefault(_flag, _note) != _note:  # a flag two modules explain differently
            raise ValueError(f"cache catalog: flag {_flag!r} is explained twice, differently ({_module.__name__})")
