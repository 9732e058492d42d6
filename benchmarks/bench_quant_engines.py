"""GPTQ on one 4096 x 4096 layer with 2048 calibration tokens: llm-compressor's
quantize_weight on CPU (and GPTQModel's GPTQ with --gptqmodel), against the GPTQ oracle
(ref.quant.gptq) on the same layer, and this machine's float64 matrix-product rate, all
measured in the same run.

    python benchmarks/bench_quant_engines.py [--quick] [--repeat 1] [--gptqmodel]

Needs the quant engines (llm-compressor 0.14.0.1, compressed-tensors 0.19.0; GPTQModel
7.7.0 for --gptqmodel) on the path: see spec/quant.md, "Engines". The layer: W [4096,
4096] float32 Gaussian, X [2048, 4096] float32 Gaussian with 1% of the channels times
8; H = (2/n) X^T X in float64, rounded to float32 for the engines. GPTQ: bits 4,
asymmetric, groups of 128 (static: llm-compressor's observer), blocksize 128,
percdamp 0.01, no act-order. --quick: 1024 x 1024 with 512 tokens.

Reported: each implementation's time (best of --repeat after no warm-up: one run is
tens of seconds), the oracle's time over the engine's (the ratio the issue asks for),
and each one's rate in units of the float64 matmul rate measured here (FLOPs counted as
2 rows cols^2 for the error feedback plus 4/3 cols^3 for the three Cholesky-type
factorizations; the float64 rate from np.matmul of two 4096 x 4096 matrices, 2 n^3).
Times are wall clock on a shared 2-core machine: print the load averages next to them.
Run on demand; never part of the tests.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from _timing import best


def layer(rows: int, cols: int, tokens: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, cols), dtype=np.float32)
    x = rng.standard_normal((tokens, cols), dtype=np.float32)
    x[:, rng.choice(cols, max(1, cols // 100), replace=False)] *= 8
    x64 = x.astype(np.float64)
    return w, (2.0 / tokens) * (x64.T @ x64)


def matmul_rate(n: int, repeat: int) -> float:
    a = np.random.default_rng(1).standard_normal((n, n))
    b = np.random.default_rng(2).standard_normal((n, n))
    a @ b
    return 2 * n**3 / best(lambda: a @ b, max(3, repeat))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--gptqmodel", action="store_true")
    args = parser.parse_args()
    rows = cols = 1024 if args.quick else 4096
    tokens = 512 if args.quick else 2048
    w, h = layer(rows, cols, tokens)
    h32 = h.astype(np.float32).astype(np.float64)
    flops = 2 * rows * cols**2 + 4 / 3 * cols**3
    print(f"load averages before: {os.getloadavg()}")
    rate64 = matmul_rate(cols, args.repeat)
    print(f"float64 matmul {cols}^2: {rate64 / 1e9:.1f} GFLOP/s")
    settings = dict(bits=4, group=128, scheme="asymmetric", percdamp=0.01, blocksize=128, act_order=False)
    rows_out = []

    from ref.conformance.adapters import llmcompressor_gptq

    t = best(lambda: llmcompressor_gptq.run(w, h32, **settings), args.repeat)
    rows_out.append(("llm-compressor quantize_weight (float32)", llmcompressor_gptq.VERSION, t))
    if args.gptqmodel:
        from ref.conformance.adapters import gptqmodel_gptq

        cfg = gptqmodel_gptq.config(bits=4, group=128, group_params="static")
        t = best(lambda: gptqmodel_gptq.run(w, h32, cfg, 128), args.repeat)
        rows_out.append(("GPTQModel GPTQ.quantize (float32)", gptqmodel_gptq.VERSION, t))
    try:
        from ref.quant import gptq as oracle
    except ImportError:
        oracle = None
    if oracle is not None:
        start = time.perf_counter()
        oracle.gptq(w, h, bits=4, group=128, group_params="static")
        rows_out.append(("ref.quant.gptq (float64 oracle)", f"numpy {np.__version__}", time.perf_counter() - start))
    print()
    print("| implementation | version | s | GFLOP/s | x float64 matmul rate |")
    print("|---|---|---|---|---|")
    for name, ver, t in rows_out:
        print(f"| {name} | {ver} | {t:.2f} | {flops / t / 1e9:.1f} | {flops / t / rate64:.2f} |")
    if oracle is not None:
        print(f"\noracle time / llm-compressor time: {rows_out[-1][2] / rows_out[0][2]:.2f}")
    print(f"load averages after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
