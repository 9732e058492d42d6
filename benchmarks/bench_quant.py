"""GPTQ on a 4096 x 4096 layer with 2048 calibration tokens, and the W4A16 GEMM oracle
on the layer it produces, each as a fraction of this machine's float64
matrix-product rate measured in the same run.

    python benchmarks/bench_quant.py [--quick] [--repeat 3] [--target 0.5]

Baseline: the best of --repeat float64 products of two n x n matrices (n = the
layer's width) timed before GPTQ and again after the GEMMs, rate = 2 n^3 / time
(the faster, so that a busy machine does not flatter the fraction). Each measured step's rate is its FLOP count (as
counted below, the arithmetic the algorithm must do, not what a particular loop does)
over its time, and the fraction is that rate over the baseline's:

  hessian     H = (2/n) X^T X from X [tokens, cols]                 2 tokens cols^2
  gptq        the upper Cholesky factor of H^-1 (one Cholesky and one
              triangular inverse suffice: 2/3 cols^3; the reference's
              three factorizations do twice that) and the column loop
              with lazy blocks (every weight updated once per later
              column: rows cols^2)                                 2/3 cols^3 + rows cols^2
  w4a16_gemm  dequantization, then x [M, cols] @ W^T               2 M rows cols

GPTQ runs 4-bit, groups of 128 (dynamic group parameters), blocksize 128, no
act-order: the reference's defaults with GPTQ-for-LLaMa's group size. The layer is
Gaussian with 8 outlier input channels in the calibration data. The GEMM's activations
are the calibration tokens rounded to bfloat16 (M = tokens), and again a decode-sized
M = 16. GPTQ and the Hessian are timed once (they take seconds); the products the
best of --repeat. Prints a markdown table; exits 1 if GPTQ (with the Hessian) falls
below --target of the baseline. Run on demand; never part of the tests.

llm-compressor: where it imports (the quant engines' environment, with
ref.conformance.adapters.llmcompressor_gptq), the same layer and Hessian also go
through its `quantize_weight` on CPU (float32, torch's threads; its observer fixes the
group parameters before GPTQ runs, the oracle's "static" groups), and the table gets
its time and the oracle's time over it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from _timing import best

from ref.formats.minifloat import round_to
from ref.quant import gemm

ROWS = COLS = 4096
TOKENS = 2048
GROUP = 128


def _layer(rows: int, cols: int, tokens: int, rng: np.random.Generator):
    w = rng.standard_normal((rows, cols)) / np.sqrt(cols)
    x = rng.standard_normal((tokens, cols))
    x[:, rng.choice(cols, 8, replace=False)] *= 20  # outlier channels
    return w, x


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _llmcompressor(w: np.ndarray, h: np.ndarray) -> float | None:
    """llm-compressor's GPTQ of the same layer (4-bit, groups of 128), in seconds, or
    None where it does not import."""
    try:
        import importlib

        adapter = importlib.import_module("ref.conformance.adapters.llmcompressor_gptq")
    except ImportError as exc:
        print(f"llm-compressor: not measured ({exc})")
        return None
    _, t = _timed(lambda: adapter.run(w.astype(np.float32), h.astype(np.float32), bits=4, group=GROUP))
    return t


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 1024 x 1024 layer with 512 tokens")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--target", type=float, default=0.5, help="GPTQ's least fraction of the baseline")
    args = parser.parse_args()
    from ref.quant import gptq  # here, so that --help works on a checkout without it

    rows, cols, tokens = (1024, 1024, 512) if args.quick else (ROWS, COLS, TOKENS)
    rng = np.random.default_rng(0)
    w, x = _layer(rows, cols, tokens, rng)
    a, b = rng.standard_normal((cols, cols)), rng.standard_normal((cols, cols))
    print(f"load average before: {os.getloadavg()[0]:.2f}, numpy {np.__version__}")
    a @ b  # warm-up
    t_base = best(lambda: a @ b, args.repeat)
    rate = 2 * cols**3 / t_base

    h, t_h = _timed(lambda: gptq.hessian(x))
    (codes, scales, zeros, _, _), t_q = _timed(lambda: gptq.gptq(w, h, bits=4, group=GROUP))
    flops_h, flops_q = 2 * tokens * cols**2, 2 / 3 * cols**3 + rows * cols**2
    rows_out = [("float64 matmul (baseline)", f"{cols}^3", t_base, 2 * cols**3),
                ("hessian", f"X [{tokens}, {cols}]", t_h, flops_h),
                ("gptq (4-bit, g 128)", f"W [{rows}, {cols}]", t_q, flops_q),
                ("hessian + gptq", "", t_h + t_q, flops_h + flops_q)]
    q8, z8 = codes.astype(np.uint8), zeros.astype(np.uint8)
    for m in (tokens, 16):
        xm = round_to(x[:m], "bfloat16").astype(np.float32)
        gemm.w4a16_gemm(xm, q8, scales, z8)  # warm-up
        t = best(lambda: gemm.w4a16_gemm(xm, q8, scales, z8), args.repeat)
        rows_out.append(("w4a16_gemm oracle", f"M = {m}", t, 2 * m * rows * cols))
    t_base = min(t_base, best(lambda: a @ b, args.repeat))
    rate = 2 * cols**3 / t_base
    rows_out[0] = ("float64 matmul (baseline)", f"{cols}^3", t_base, 2 * cols**3)
    engine = _llmcompressor(w, h)
    if engine is not None:
        rows_out.append(("llm-compressor quantize_weight (float32)", f"W [{rows}, {cols}]", engine, flops_q))
    print(f"load average after: {os.getloadavg()[0]:.2f}\n")
    print("| step | size | s | GFLOP/s | fraction of float64 matmul |")
    print("|---|---|---|---|---|")
    for name, size, t, flops in rows_out:
        print(f"| {name} | {size} | {t:.3f} | {flops / t / 1e9:.1f} | {flops / t / rate:.2f} |")
    if engine is not None:
        print(f"\nthe oracle's gptq takes {t_q / engine:.2f} times llm-compressor's time on the same layer")
    fraction = (flops_h + flops_q) / (t_h + t_q) / rate
    print(f"\nhessian + gptq at {fraction:.2f} of the float64 matmul rate "
          f"({'>=' if fraction >= args.target else '<'} target {args.target})")
    return 0 if fraction >= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
