"""Encode 16M float32 values to each element format: the oracle against ml_dtypes' C++
cast of the same array, in the same run (numpy's cast for float16).

    python benchmarks/bench_formats.py [--n 16777216] [--repeat 3]

Prints, per format, the best wall time of each and the ratio oracle / baseline
(below 1 means the oracle is faster). Run on demand; never part of the tests.
"""

from __future__ import annotations

import argparse
import ml_dtypes
import numpy as np
from _timing import best

from ref.formats import FORMATS, encode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1 << 24)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(args.n) * rng.choice([1e-3, 1.0, 30.0], args.n)).astype(np.float32)
    print(f"{args.n} float32 values; best of {args.repeat}; numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}")
    print(f"{'format':18} {'oracle s':>9} {'baseline s':>10} {'ratio':>6}")
    for name, f in FORMATS.items():
        target = np.float16 if name == "float16" else getattr(ml_dtypes, name)
        overflow = "nonsaturating" if (f.has_inf or f.has_nan) else "saturate"
        ours = best(lambda: encode(x, f, overflow=overflow), args.repeat)
        with np.errstate(all="ignore"):
            theirs = best(lambda: x.astype(target), args.repeat)
        print(f"{name:18} {ours:9.3f} {theirs:10.3f} {ours / theirs:6.2f}")


if __name__ == "__main__":
    main()
