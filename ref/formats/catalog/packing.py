"""FP4 packing: two E2M1 codes per byte.

  formats.float4_e2m1fn.pack     codes [..., 2n] -> bytes [..., n]
  formats.float4_e2m1fn.unpack   bytes [..., n] -> codes [..., 2n]

A technique module declares, for each operation: its oracle (the public function
itself), the variant axes, the golden vectors (each flagged with the bug class it
targets), random examples, and how outputs are compared.
"""

from __future__ import annotations

from functools import partial

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ref.formats.packing import NibbleOrder, pack_fp4, unpack_fp4
from ref.testing.catalog_types import Area, Flag, Variant, seed_for
from ref.testing.compare import compare_codes, compare_exact
from ref.testing.params import variant_params
from ref.testing.strategies import block_shapes, codes, small_shapes
from ref.testing.vector_files import Case, VectorSpec

AREA = Area("formats", spec="spec/formats.md")

FLAGS = {
    "NibbleOrder": Flag("FP4 nibbles packed high-first where low-first is declared, or the reverse",
                        "every element pair is swapped: the tensor is silently permuted"),
}

ORDER = Variant("order", NibbleOrder, NibbleOrder.LOW_FIRST,
                "which nibble holds element 0: low (PyTorch, vLLM, TE, FlashInfer, OCP) or high")


def _vector(name: str, array: np.ndarray, order: str, comment: str, flags: tuple[str, ...],
            result: str = "valid") -> VectorSpec:
    return VectorSpec(f"{comment} ({order})", flags, Case({name: array}, {"order": order}), result)


def pack_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("formats.float4_e2m1fn.pack"))
    every_pair = np.stack(np.meshgrid(np.arange(16), np.arange(16)), -1).reshape(-1).astype(np.uint8)
    specs = []
    for order in ORDER.values:
        vector = partial(_vector, "codes", order=order)
        specs += [
            vector(np.uint8([0x1, 0xE]), comment="two distinct codes show which nibble is element 0",
                   flags=("NibbleOrder",)),
            vector(every_pair, comment="every pair of codes", flags=("NibbleOrder", "Exhaustive")),
            vector(rng.integers(0, 16, (3, 2, 32)).astype(np.uint8), comment="random codes with leading axes",
                   flags=("NibbleOrder", "Random")),
            vector(np.zeros((3, 0), np.uint8), comment="empty input gives empty bytes", flags=("EmptyInput",)),
            vector(np.array(3, np.uint8), comment="a 0-d input is rejected", flags=("EmptyInput", "InvalidInput"),
                   result="invalid"),
            vector(np.zeros(3, np.uint8), comment="odd last axis is rejected", flags=("InvalidInput",),
                   result="invalid"),
            vector(np.int64([257, 14]), comment="int64 codes are rejected, not narrowed (257 is not 1)",
                   flags=("InvalidInput",), result="invalid"),
        ]
        specs += [vector(np.uint8([(1 << bit) | 1, 0x01]), comment=f"a code with bit {bit} set is rejected, "
                         "not masked", flags=("DirtyBits", "InvalidInput"), result="invalid")
                  for bit in range(4, 8)]
    return specs


def unpack_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("formats.float4_e2m1fn.unpack"))
    specs = []
    for order in ORDER.values:
        vector = partial(_vector, "packed", order=order)
        specs += [
            vector(np.arange(256, dtype=np.uint8), comment="every byte: a packed byte has no spare bits, so none "
                   "is rejected", flags=("NibbleOrder", "Exhaustive", "DirtyBits")),
            vector(rng.integers(0, 256, (2, 3, 8)).astype(np.uint8), comment="random bytes with leading axes",
                   flags=("NibbleOrder", "Random")),
            vector(np.zeros((0, 4), np.uint8), comment="empty input gives empty codes", flags=("EmptyInput",)),
            vector(np.zeros(4, np.int32), comment="non-uint8 input is rejected", flags=("InvalidInput",),
                   result="invalid"),
            vector(np.array(0x21, np.uint8), comment="a 0-d input is rejected", flags=("EmptyInput", "InvalidInput"),
                   result="invalid"),
        ]
    return specs


def _examples(name: str, arrays: st.SearchStrategy):
    """Cases of one array input and a supported nibble order."""
    return lambda supported: st.tuples(arrays, variant_params(supported)).map(
        lambda t: Case({name: t[0]}, t[1]))


OPERATIONS = [
    AREA.exact("float4_e2m1fn.pack", pack_fp4, anchor="packing", summary="FP4 codes [..., 2n] -> bytes [..., n]",
               variants=(ORDER,), vectors=pack_vectors, compare=compare_exact, case_flags=lambda case: ("NibbleOrder",),
               examples=_examples("codes", codes("float4_e2m1fn", shape=block_shapes(block=2))),
               array_format=lambda name, arr: {"codes": "float4_e2m1fn", "expected": "float4_e2m1fn_x2"}.get(name)),
    AREA.exact("float4_e2m1fn.unpack", unpack_fp4, anchor="packing", summary="bytes [..., n] -> FP4 codes [..., 2n]",
               variants=(ORDER,), vectors=unpack_vectors, compare=partial(compare_codes, fmt="float4_e2m1fn"),
               case_flags=lambda case: ("NibbleOrder",),
               examples=_examples("packed", hnp.arrays(np.uint8, small_shapes(max_dims=3, max_side=8))),
               array_format=lambda name, arr: {"packed": "float4_e2m1fn_x2", "expected": "float4_e2m1fn"}.get(name)),
]
