"""The bundled default implementation `python -m ref conform` runs with no --impl:
ml_dtypes' C++ casts for the element formats (a real third-party library, with its
known deviations listed in ml_dtypes_casts.xfails), the float32 NumPy attention
kernels of `numpy_attention` for the bounded attention ops, and the Philox
stochastic-rounding samplers of `numpy_stochastic` for the statistical
`encode_stochastic_rng` ops (both written independently of the oracles).
`ref.conformance.adapters.DEFAULT` names this module for the command line and the
pytest plugin; `XFAILS` is its expected failures (the casts')."""

from __future__ import annotations

from pathlib import Path

from ref.conformance.adapters import ml_dtypes_casts, numpy_attention, numpy_stochastic

XFAILS = Path(ml_dtypes_casts.__file__).with_suffix(".xfails")  # the default run's expected failures
NAME = f"{ml_dtypes_casts.NAME} casts + {numpy_attention.NAME} + {numpy_stochastic.NAME}"
VERSION = f"ml_dtypes {ml_dtypes_casts.VERSION}, numpy {numpy_attention.VERSION}"
OPS = {**ml_dtypes_casts.OPS, **numpy_attention.OPS, **numpy_stochastic.OPS}
VARIANTS = {**ml_dtypes_casts.VARIANTS, **numpy_attention.VARIANTS, **numpy_stochastic.VARIANTS}
DTYPES = dict(ml_dtypes_casts.DTYPES)
