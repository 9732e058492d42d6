"""Quantize 16M float32 values to MXFP4, NVFP4 and MXFP8 with the oracle, against
ml_dtypes' C++ cast of the same array to the same element type, in the same run.

    python benchmarks/bench_block_codecs.py [--n 16777216] [--repeat 3]

The baseline only converts elements (no amax, no scales), so a ratio near 1 would
mean the block bookkeeping is free. Run on demand; never part of the tests.
"""

from __future__ import annotations

import argparse
import ml_dtypes
import numpy as np
from _timing import best

from ref.formats import mx, nvfp4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1 << 24)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.n // 4096, 4096)).astype(np.float32)
    cases = [
        ("MXFP4", lambda: mx.quantize(x, "float4_e2m1fn"), ml_dtypes.float4_e2m1fn),
        ("NVFP4 (TE recipe)", lambda: nvfp4.quantize(x), ml_dtypes.float4_e2m1fn),
        ("MXFP8 E4M3", lambda: mx.quantize(x, "float8_e4m3fn"), ml_dtypes.float8_e4m3fn),
    ]
    print(f"{x.size} float32 values; best of {args.repeat}; numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}")
    print(f"{'codec':18} {'oracle s':>9} {'cast s':>7} {'ratio':>6}")
    for name, fn, dtype in cases:
        ours = best(fn, args.repeat)
        theirs = best(lambda: x.astype(dtype), args.repeat)
        print(f"{name:18} {ours:9.3f} {theirs:7.3f} {ours / theirs:6.2f}")


if __name__ == "__main__":
    main()
