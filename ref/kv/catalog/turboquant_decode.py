"""TurboQuant_prod's decoder (spec/kv.md#turboquant-prod) as an exact op with float
outputs: the reconstruction x_mse + sqrt(pi/2) / m * gamma * S^T z whose inner product
with any query is `kv.turboquant.estimate_prod`'s score.

  kv.turboquant.dequantize_prod  codes, norms, signs, residual_norms, rotation, projection -> x_hat [..., d]

Its inputs are the caches estimate_prod's vectors use (without the queries): exact
rotations, norms on a 2^-24 grid.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.kv import turboquant as tq
from ref.kv.catalog.common import AREA
from ref.kv.catalog.turboquant import BITS_PROD, prod_cache
from ref.kv.catalog.turboquant_compare import close
from ref.testing.catalog_types import seed_for
from ref.testing.flags import EMPTY_INPUT, INVALID_INPUT, NAN, RANDOM
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS"]

FLAGS: dict = {}  # its flags are turboquant.py's
_CACHE = ("codes", "norms", "signs", "residual_norms", "rotation", "projection")


def _cache(rng, b, h, t, d, m=None) -> dict:
    full = prod_cache(rng, b, h, h, t, d, m=m)
    return {k: full[k] for k in _CACHE}


def dequantize_prod_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("kv.turboquant.dequantize_prod"))
    flags = (RANDOM, "SketchScale", "NormKept", "RotationInverse", "ProdBits")
    specs = [VectorSpec(f"{b} bits, H = 2, T = 6, d = 64", flags, Case(_cache(rng, b, 2, 6, 64), {"bits": b}))
             for b in tq.PROD_BITS]
    base = _cache(rng, 3, 1, 5, 16, m=8)
    specs += [
        VectorSpec("a sketch of m = 8 rows for d = 16: the QJL term scales by 1/m", ("SketchScale",), Case(base)),
        VectorSpec("an empty cache (T = 0)", (EMPTY_INPUT,),
                   Case({**base, **{k: base[k][:, :, :0] for k in ("codes", "norms", "signs", "residual_norms")}})),
        VectorSpec("a residual norm of 0: x_hat = x_mse", ("NormKept",),
                   Case({**base, "residual_norms": base["residual_norms"] * 0})),
        VectorSpec("signs of the wrong length are rejected", (INVALID_INPUT, "SketchScale"),
                   Case({**base, "signs": base["signs"][..., :4]}), "invalid"),
        VectorSpec("a sign 0 is rejected", (INVALID_INPUT, "SignOfZero"),
                   Case({**base, "signs": np.where(np.arange(8) == 0, 0, base["signs"]).astype(np.int8)}), "invalid"),
        VectorSpec("a negative residual norm is rejected", (INVALID_INPUT,),
                   Case({**base, "residual_norms": -base["residual_norms"] - 1}), "invalid"),
        VectorSpec("a NaN norm is rejected", (INVALID_INPUT, NAN),
                   Case({**base, "norms": np.where(np.arange(5) == 1, np.nan, base["norms"])}), "invalid"),
    ]
    return specs


def _examples(supported):
    @st.composite
    def case(draw):
        bits = draw(st.sampled_from(list(supported["bits"])), label="bits")
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
        return Case(_cache(rng, bits, draw(st.integers(1, 2), label="H"), draw(st.integers(0, 5), label="T"), 16,
                           m=draw(st.sampled_from([8, 16]), label="m")), {"bits": bits})
    return case()


OPERATIONS = [
    AREA.exact("turboquant.dequantize_prod", tq.dequantize_prod, anchor="turboquant-prod", golden_float_bound=1e-10,
               summary="(codes, norms, signs, residual norms, rotation, projection) -> x_mse + sqrt(pi/2)/m gamma "
                       "S^T z", variants=(BITS_PROD,), vectors=dequantize_prod_vectors, examples=_examples,
               compare=close("values")),
]
