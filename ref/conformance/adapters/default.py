"""The bundled default implementation `python -m ref conform` runs with no --impl. It
covers every op of the catalog, with code that is not the oracle:

- ml_dtypes' C++ casts for the element codecs (`ml_dtypes_casts`: a real third-party
  library, with its known deviations listed in ml_dtypes_casts.xfails);
- `numpy_sr_bits`: stochastic rounding with explicit random bits by integer
  arithmetic on the input's bits;
- `numpy_stochastic`: Philox stochastic-rounding samplers for the statistical
  `encode_stochastic_rng` ops;
- `numpy_blocks`: the MX and NVFP4 block codecs composed from float32/float64 NumPy
  steps and ml_dtypes' element casts, as a kernel composes them;
- `numpy_groups`: integer group codecs, int32 and FP4 packing by bit arithmetic, the
  128x4 scale layout by reshapes and transposes;
- `numpy_attention`: float32 NumPy attention kernels for the bounded attention ops;
- `numpy_roofline`: the roofline accounting (bytes, parameters, FLOPs) by exact
  Python-int arithmetic on object arrays, and the serving formulas in float64;
- `numpy_paged`: paged KV storage token by token (slots, bit copies by slot, the
  page table) and a block manager with a free stack.

All but ml_dtypes_casts are written independently of the oracles and import nothing
from ref. `ref.conformance.adapters.DEFAULT` names this module for the command line
and the pytest plugin; `XFAILS` is its expected failures (the casts')."""

from __future__ import annotations

from pathlib import Path

from ref.conformance.adapters import (
    ml_dtypes_casts,
    numpy_attention,
    numpy_blocks,
    numpy_groups,
    numpy_paged,
    numpy_roofline,
    numpy_sr_bits,
    numpy_stochastic,
)

PARTS = (ml_dtypes_casts, numpy_sr_bits, numpy_stochastic, numpy_blocks, numpy_groups, numpy_attention,
         numpy_roofline, numpy_paged)
XFAILS = Path(ml_dtypes_casts.__file__).with_suffix(".xfails")  # the default run's expected failures
NAME = (f"{ml_dtypes_casts.NAME} casts + {numpy_blocks.NAME} + {numpy_groups.NAME} + {numpy_sr_bits.NAME} + "
        f"{numpy_attention.NAME} + {numpy_stochastic.NAME} + {numpy_roofline.NAME} + {numpy_paged.NAME}")
VERSION = f"ml_dtypes {ml_dtypes_casts.VERSION}, numpy {numpy_attention.VERSION}"
OPS = {name: kernel for part in PARTS for name, kernel in part.OPS.items()}
VARIANTS = {pattern: axes for part in PARTS for pattern, axes in part.VARIANTS.items()}
DTYPES = dict(ml_dtypes_casts.DTYPES)
