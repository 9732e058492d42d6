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
from ref.testing.golden import Case, VectorSpec
from ref.testing.strategies import block_shapes, codes, small_shapes

AREA = Area("formats", spec="spec/formats.md")

FLAGS = {
    "NibbleOrder": Flag("FP4 nibbles packed high-first where low-first is declared, or the reverse",
                        "every element pair is swapped: the tensor is silently permuted"),
}

ORDER = Variant("order", NibbleOrder, NibbleOrder.LOW_FIRST,
                "which nibble holds element 0: low (PyTorch, vLLM, TE, FlashInfer, OCP) or high")


def pack_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("formats.float4_e2m1fn.pack"))
    every_pair = np.stack(np.meshgrid(np.arange(16), np.arange(16)), -1).reshape(-1).astype(np.uint8)
    specs = []
    for order in ORDER.values:
        def add(comment, flags, codes, result="valid"):
            specs.append(VectorSpec(f"{comment} ({order})", flags, Case({"codes": codes}, {"order": order}), result))

        add("two distinct codes show which nibble is element 0", ("NibbleOrder",), np.uint8([0x1, 0xE]))
        add("every pair of codes", ("NibbleOrder", "Exhaustive"), every_pair)
        add("random codes with leading axes", ("NibbleOrder", "Random"), rng.integers(0, 16, (3, 2, 32)).astype(np.uint8))
        add("empty input gives empty bytes", ("EmptyInput",), np.zeros((3, 0), np.uint8))
        add("a 0-d input is rejected", ("EmptyInput", "InvalidInput"), np.array(3, np.uint8), "invalid")
        add("odd last axis is rejected", ("InvalidInput",), np.zeros(3, np.uint8), "invalid")
        add("int64 codes are rejected, not narrowed (257 is not 1)", ("InvalidInput",), np.int64([257, 14]),
            "invalid")
        for bit in range(4, 8):
            add(f"a code with bit {bit} set is rejected, not masked", ("DirtyBits", "InvalidInput"),
                np.uint8([(1 << bit) | 1, 0x01]), "invalid")
    return specs


def unpack_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("formats.float4_e2m1fn.unpack"))
    specs = []
    for order in ORDER.values:
        def add(comment, flags, packed, result="valid"):
            specs.append(VectorSpec(f"{comment} ({order})", flags, Case({"packed": packed}, {"order": order}), result))

        add("every byte: a packed byte has no spare bits, so none is rejected", ("NibbleOrder", "Exhaustive",
            "DirtyBits"), np.arange(256, dtype=np.uint8))
        add("random bytes with leading axes", ("NibbleOrder", "Random"), rng.integers(0, 256, (2, 3, 8)).astype(np.uint8))
        add("empty input gives empty codes", ("EmptyInput",), np.zeros((0, 4), np.uint8))
        add("non-uint8 input is rejected", ("InvalidInput",), np.zeros(4, np.int32), "invalid")
        add("a 0-d input is rejected", ("EmptyInput", "InvalidInput"), np.array(0x21, np.uint8), "invalid")
    return specs


def _examples(name: str, arrays: st.SearchStrategy):
    """Cases of one array input and a supported nibble order."""
    return lambda supported: st.tuples(arrays, st.sampled_from(list(supported["order"]))).map(
        lambda t: Case({name: t[0]}, {"order": t[1]}))


OPERATIONS = [
    AREA.exact("float4_e2m1fn.pack", pack_fp4, anchor="packing", summary="FP4 codes [..., 2n] -> bytes [..., n]",
               variants=(ORDER,), vectors=pack_vectors, compare=compare_exact,
               examples=_examples("codes", codes("float4_e2m1fn", shape=block_shapes(block=2))),
               array_format=lambda name, arr: {"codes": "float4_e2m1fn", "expected": "float4_e2m1fn_x2"}.get(name)),
    AREA.exact("float4_e2m1fn.unpack", unpack_fp4, anchor="packing", summary="bytes [..., n] -> FP4 codes [..., 2n]",
               variants=(ORDER,), vectors=unpack_vectors, compare=partial(compare_codes, fmt="float4_e2m1fn"),
               examples=_examples("packed", hnp.arrays(np.uint8, small_shapes(max_dims=3, max_side=8))),
               array_format=lambda name, arr: {"packed": "float4_e2m1fn_x2", "expected": "float4_e2m1fn"}.get(name)),
]
