"""roofline.tensor_bytes: bytes of [rows, cols] weight matrices in a storage format.

  (rows, cols: int64, one shape) -> bytes int64     variant format (ref.roofline.weights.FORMATS)

Exact. Blocks run along cols (the reduction axis) within each row; float8_block128's
blocks are 128 x 128; scales of a partial block are stored; a per-tensor scale is
stored once, and not for an empty tensor; bytes are rounded up once per tensor.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.roofline.catalog.common import AREA, SHARED_FLAGS, dtype_vectors, invalid_vectors
from ref.roofline.weights import FORMATS, tensor_bytes
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.compare import compare_exact
from ref.testing.params import variant_params
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS"]

FLAGS = {
    "PartialBlock": Flag("a partial block (cols not a multiple of the block) given no scale (floor instead of "
                         "ceil)", "a ragged matrix's scales are undercounted: 4097 columns of NVFP4 lose a scale "
                         "per row"),
    "ScaleOverhead": Flag("block, row or tensor scales left out, or stored at the wrong width (an MX scale as 16 "
                          "bits)", "a quantized model looks 3% (MXFP4) to 12% (NVFP4) smaller than it is"),
    "TensorScale": Flag("NVFP4's or FP8's per-tensor FP32 scale forgotten, counted per block, or counted for an "
                        "empty tensor", "bytes off by 4 per tensor (or more)"),
    "BlockAxis": Flag("blocks counted over the flattened tensor instead of along each row",
                      "a matrix whose rows are not whole blocks gets too few scales"),
    "ElementBits": Flag("the element width of another format (FP8 as 2 bytes, FP4 codes one per byte, unpacked)",
                        "a model's bytes off by 2x: a 4-bit checkpoint sized as 8-bit"),
    **{name: SHARED_FLAGS[name] for name in ("CeilOnce", "Int64")},
}

FORMAT = Variant("format", tuple(FORMATS), "bfloat16",
                 "storage format: element bits, block (along cols, 128x128 for float8_block128), scale, zero "
                 "point, row and tensor scale bits (ref.roofline.weights.FORMATS, each with its source)")

BLOCKED = [f.name for f in FORMATS.values() if f.block]
TENSOR_SCALED = [f.name for f in FORMATS.values() if f.tensor_bits]


def _case(rows, cols, fmt: str | None = None) -> Case:
    return Case({"rows": np.asarray(rows, np.int64), "cols": np.asarray(cols, np.int64)},
                {} if fmt is None else {"format": fmt})


def _vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("roofline.tensor_bytes"))
    v: list[VectorSpec] = []

    def add(comment, flags, case, result="valid"):
        v.append(VectorSpec(comment, tuple(flags), case, result))

    for name, f in FORMATS.items():
        scaled = ("ScaleOverhead",) if (f.block or f.row_bits or f.tensor_bits) else ()
        tensor = ("TensorScale",) if f.tensor_bits else ()
        add(f"Qwen3-8B's q_proj [4096, 4096] and down_proj [4096, 12288] ({name})", ("ElementBits",) + scaled + tensor,
            _case([4096, 4096], [4096, 12288], name))
        add(f"one weight [1, 1] ({name}): one partial block, one row, one tensor scale",
            ("ElementBits",) + scaled + tensor + (("PartialBlock",) if f.block else ()), _case(1, 1, name))
        add(f"Qwen3-8B's embedding/LM head [151936, 4096]: past 2^31 bits ({name})", ("Int64",) + scaled,
            _case([151936], [4096], name))
        add(f"[2^27, 2^27]: past 2^53 bits ({name})", ("Int64",) + scaled, _case(1 << 27, 1 << 27, name))
        add(f"one row of 2^53 + 1 columns ({name}): an odd count float64 cannot hold", ("Int64",) + scaled,
            _case([1], [(1 << 53) + 1], name))
        big = (1 << 64) // f.element_bits  # rows * cols * element_bits = 2^64: past int64; the bytes fit
        add(f"one row of 2^64 / {f.element_bits} columns ({name}): bits past 2^63, bytes fit (0-d inputs)",
            ("Int64",) + scaled, _case(1, big, name))
        add(f"one row of 2^64 / {f.element_bits} columns ({name}): bits past 2^63, bytes fit (1-d inputs)",
            ("Int64",) + scaled, _case([1], [big], name))
        add(f"a row of no columns and a column of no rows ({name}): no elements, no blocks, no tensor scale; "
            "a per-row scale for every row", ("EmptyInput",) + tensor + scaled, _case([5, 0], [0, 7], name))
        if f.block:
            b, br = f.block, f.block_rows
            add(f"cols one past a whole block, and one short ({name}, block {b}): the partial block has a scale",
                ("PartialBlock", "ScaleOverhead"), _case([br, br, 3], [b + 1, b - 1, 4 * b + 1], name))
            add(f"3 rows of 1.5 blocks ({name}): blocks along each row, not over the flattened tensor",
                ("BlockAxis", "PartialBlock", "ScaleOverhead"), _case([3 * br], [b + b // 2], name))
            if br > 1:
                add(f"rows one past a whole 128-row block ({name}): 2-D blocks, a partial row block has a scale",
                    ("PartialBlock", "BlockAxis", "ScaleOverhead"), _case([br + 1, 1], [b, b], name))
        if f.element_bits % 8 or f.block:
            add(f"5 rows of 3 elements ({name}): bits rounded to bytes once per tensor, not per row",
                ("CeilOnce",) + scaled, _case([5, 1], [3, 1], name))
        add(f"random shapes in a [3, 4] batch ({name})", ("Random",) + scaled,
            _case(rng.integers(0, 3000, (3, 4)), rng.integers(0, 3000, (3, 4)), name))
    add("no matrices (empty arrays)", ("EmptyInput",), _case(np.zeros(0, np.int64), np.zeros(0, np.int64)))
    add("an empty tensor of no rows is 0 bytes in every format", ("EmptyInput", "TensorScale"), _case(0, 4096))
    add("bytes past int64 are rejected, not wrapped", ("Int64", "InvalidInput"), _case(1 << 40, 1 << 40), "invalid")
    v.extend(invalid_vectors(_case(16, 16), counts=("rows", "cols")))
    v.extend(dtype_vectors([(f"Qwen3-8B's embedding [151936, 4096] ({f}: past 2^32 bits)", _case(151936, 4096, f),
                             (np.int32, np.uint32)) for f in ("bfloat16", "nvfp4")]
                           + [(f"[255, 255] ({f}: every input below 256)", _case(255, 255, f), (np.uint8,))
                              for f in ("bfloat16", "nvfp4", "float8_block128")], ("rows", "cols")))
    return v


def _examples(supported):
    dims = st.integers(0, 1 << 16)
    shapes = st.sampled_from([(), (0,), (1,), (3,), (2, 2)])
    arrays = shapes.flatmap(lambda s: st.tuples(
        st.lists(dims, min_size=int(np.prod(s)), max_size=int(np.prod(s))),
        st.lists(dims, min_size=int(np.prod(s)), max_size=int(np.prod(s))), st.just(s)))
    return st.tuples(arrays, variant_params(supported)).map(
        lambda t: Case({"rows": np.array(t[0][0], np.int64).reshape(t[0][2]),
                        "cols": np.array(t[0][1], np.int64).reshape(t[0][2])}, t[1]))


def _case_flags(case) -> tuple[str, ...]:
    f = FORMATS[case.params.get("format", "bfloat16")]
    cols = np.asarray(case.inputs["cols"])
    found = [("ScaleOverhead", bool(f.block or f.row_bits or f.tensor_bits)), ("TensorScale", bool(f.tensor_bits)),
             ("PartialBlock", bool(f.block) and bool(np.any(cols % max(f.block, 1)))),
             ("BlockAxis", bool(f.block) and bool(np.any(cols % max(f.block, 1))))]
    return tuple(flag for flag, hit in found if hit) or ("Random",)


OPERATIONS = [
    AREA.exact("tensor_bytes", tensor_bytes, anchor="tensor-bytes",
               summary="bytes of [rows, cols] weight matrices in a storage format -> int64",
               variants=(FORMAT,), vectors=_vectors, examples=_examples, compare=compare_exact,
               case_flags=_case_flags),
]
