"""The 128x4 blocked scale layout (spec/formats.md#scale-layout) cuBLAS and CUTLASS read
MX and NVFP4 block scales in.

  formats.scales.to_blocked    scales [R, C] -> the blocked layout (flat, zero padded)
  formats.scales.from_blocked  (blocked, rows, cols) -> scales [rows, cols]

Both exact; the oracles are `ref.formats.layouts.to_blocked` and `from_blocked`.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.formats import layouts
from ref.testing.catalog_types import Area, Flag, seed_for
from ref.testing.compare import compare_exact
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS"]

FORMATS = Area("formats", spec="spec/formats.md")

FLAGS = {
    "LayoutTranspose": Flag("the 128x4 scale layout with rows and columns (or its 32-row interleave) swapped",
                            "a GEMM reads every block with another block's scale"),
    "LayoutPadding": Flag("scale rows not padded to 128 (or columns to 4), or padding left uninitialised",
                          "tiles after the first are misaligned, or garbage scales feed padded rows"),
}


def _blocked_size(rows: int, cols: int) -> int:
    return -(-rows // 128) * 128 * (-(-cols // 4) * 4)


def _to_blocked_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("formats.scales.to_blocked"))
    specs = []
    for rows, cols in ((1, 1), (128, 4), (129, 5), (300, 7), (256, 8), (32, 3)):
        s = rng.integers(1, 256, (rows, cols)).astype(np.uint8)
        specs.append(VectorSpec(f"{rows}x{cols} scales (padded to {-(-rows // 128) * 128}x{-(-cols // 4) * 4})",
                                ("LayoutTranspose", "LayoutPadding"), Case({"scales": s})))
    specs.append(VectorSpec("no rows", ("EmptyInput",), Case({"scales": np.zeros((0, 4), np.uint8)})))
    specs.append(VectorSpec("float32 scales: the layout moves any element type unchanged", ("LayoutTranspose",),
                            Case({"scales": rng.standard_normal((130, 5)).astype(np.float32)})))
    specs.append(VectorSpec("1-D scales are rejected", ("InvalidInput", "InputRank"),
                            Case({"scales": np.zeros(8, np.uint8)}), "invalid"))
    specs.append(VectorSpec("3-D scales are rejected, not flattened", ("InvalidInput", "InputRank"),
                            Case({"scales": np.zeros((2, 128, 4), np.uint8)}), "invalid"))
    return specs


def _from_blocked_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("formats.scales.from_blocked"))
    specs = []
    for rows, cols in ((1, 1), (128, 4), (129, 5), (300, 7)):
        specs.append(VectorSpec(f"{rows}x{cols} from its blocked layout", ("LayoutTranspose",),
                                Case({"blocked": rng.integers(0, 256, _blocked_size(rows, cols)).astype(np.uint8),
                                      "rows": np.int64(rows), "cols": np.int64(cols)})))
    specs.append(VectorSpec("a blocked array of the wrong length is rejected", ("InvalidInput",),
                            Case({"blocked": np.zeros(100, np.uint8), "rows": np.int64(128), "cols": np.int64(4)}),
                            "invalid"))
    specs.append(VectorSpec("a 2-D blocked array is rejected, not flattened", ("InvalidInput", "InputRank"),
                            Case({"blocked": np.zeros((128, 4), np.uint8), "rows": np.int64(128),
                                  "cols": np.int64(4)}), "invalid"))
    return specs


_SIZES = st.tuples(st.integers(0, 300), st.integers(1, 12), st.integers(0, 2**32 - 1))


def _to_blocked_examples(supported):
    return _SIZES.map(lambda t: Case({"scales": np.random.default_rng(t[2]).integers(0, 256, t[:2])
                                      .astype(np.uint8)}, {}))


def _from_blocked_examples(supported):
    def make(t):
        rows, cols, seed = t
        b = np.random.default_rng(seed).integers(0, 256, _blocked_size(rows, cols)).astype(np.uint8)
        return Case({"blocked": b, "rows": np.int64(rows), "cols": np.int64(cols)}, {})

    return _SIZES.map(make)


def _layout_flags(case: Case) -> tuple[str, ...]:
    """LayoutPadding when rows or cols are not whole 128x4 tiles, else LayoutTranspose."""
    inputs = case.inputs
    rows, cols = np.shape(inputs["scales"]) if "scales" in inputs else (int(inputs["rows"]), int(inputs["cols"]))
    return ("LayoutPadding",) if rows % 128 or cols % 4 else ("LayoutTranspose",)


OPERATIONS = [
    FORMATS.exact("scales.to_blocked", layouts.to_blocked, anchor="scale-layout",
                  summary="scales [R, C] -> cuBLAS/CUTLASS 128x4 blocked layout (flat, zero padded)",
                  vectors=_to_blocked_vectors, examples=_to_blocked_examples, compare=compare_exact,
                  case_flags=_layout_flags),
    FORMATS.exact("scales.from_blocked", layouts.from_blocked, anchor="scale-layout",
                  summary="(blocked, rows, cols) -> scales [rows, cols]",
                  vectors=_from_blocked_vectors, examples=_from_blocked_examples, compare=compare_exact,
                  case_flags=_layout_flags),
]
