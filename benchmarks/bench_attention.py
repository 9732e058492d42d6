"""The attention oracle `attend`: decode throughput at long context and the prefill
FLOP rate, each against a named float64 BLAS baseline measured in the same run.

    python benchmarks/bench_attention.py [--quick] [--repeat 3]

Shapes: GQA with 32 query heads over 8 KV heads, head dim 128, batch 1, causal
(bottom-right aligned, so a decode query sees every key).

Decode: one query token (Lq = 1) against Lk = 32k and 128k keys (--quick: 8k, 32k).
The oracle is timed on float32 K, V (it casts to float64 itself) and on float64 K, V.
Baseline: the two float64 passes any decode step must make over K and V, as plain
BLAS products per KV head: s = K_h q_g^T ([Lk, D] x [D, 4]) and o = s^T V_h
([4, Lk] x [Lk, Dv]), no softmax. Ratio = oracle time / baseline time. tok/s is calls
per second (one token per call); KV GB/s is the bytes of K and V as passed, per oracle
second. Peak memory is tracemalloc's peak above what was live before the call (numpy
reports its buffers to tracemalloc), in units of the float64 K and V (2 Lk Hkv D * 8
bytes). Checks: it grows linearly in Lk, and stays under COPIES = 3 of those units. A
per-query-head [Hq, Lq, Lk, D] float64 intermediate (K or V broadcast over the G = 4
heads of a group) is 2 units on its own, and float32 inputs need 1 unit of float64
copies, so such an intermediate cannot hide under the budget; nothing [Lq, Lk]-
quadratic is possible at Lq = 1.

Prefill: Lq = Lk = 2048 (--quick: 512), float32 q, k, v. FLOPs are counted as
4 * B * Hq * Lq * Lk * D: the two matrix products over the full square, causal or
not (the causal triangle is about half of that useful work). The rate is compared
with np.matmul of two float64 2048 x 2048 matrices (2 n^3 FLOPs) in the same process,
hence with the same BLAS thread count. Peak memory is reported in units of one
[B, Hq, Lq, Lk] float64 score tensor, which the oracle materializes by design; the
check is that it stays below one [B, Hq, Lq, Lk, D] float64 product.

Times are the best of --repeat calls after a warm-up call (the cheap baselines: of at
least 5). On a shared machine, check the load averages printed before and after.

Prints markdown tables, then the checks; exits 1 if one failed. Run on demand; never
part of the tests.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import tracemalloc

import numpy as np
from _timing import best

from ref.attention.attend import attend

B, HQ, HKV, D = 1, 32, 8, 128
G = HQ // HKV
GIB = 1 << 30
COPIES = 3  # decode: the oracle's peak stays under this many float64 copies of K and V


def peak_bytes(fn) -> int:
    """Bytes allocated at the peak of fn() above those live when it started."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def gemv_baseline(q64, k64, v64) -> None:
    """s = K_h q^T and o = s^T V_h per KV head: each float64 element of K and V read once."""
    for h in range(HKV):
        s = k64[0, :, h, :] @ q64[0, 0, h * G:(h + 1) * G].T  # [Lk, G]
        s.T @ v64[0, :, h, :]  # [G, Dv]


def decode(lk: int, q, repeat: int, rng) -> list[dict]:
    """Rows for float32 and float64 K, V at one context; its arrays are freed on return."""
    rows = []
    q64 = q.astype(np.float64)
    k = rng.standard_normal((B, lk, HKV, D), dtype=np.float32)
    v = rng.standard_normal((B, lk, HKV, D), dtype=np.float32)
    k64, v64 = k.astype(np.float64), v.astype(np.float64)
    gemv_baseline(q64, k64, v64)  # warm-up: fault in pages, spin up BLAS threads
    base = best(lambda: gemv_baseline(q64, k64, v64), max(repeat, 5))
    for kk, vv in ((k, v), (k64, v64)):
        out, lse = attend(q, kk, vv, causal=True)  # warm-up, and a sanity check
        assert out.shape == (B, 1, HQ, D) and np.isfinite(out).all() and np.isfinite(lse).all()
        del out, lse
        t = best(lambda: attend(q, kk, vv, causal=True), repeat)
        peak = peak_bytes(lambda: attend(q, kk, vv, causal=True))
        rows.append(dict(lk=lk, dtype=kk.dtype.name, t=t, base=base, kv_bytes=kk.nbytes + vv.nbytes,
                         kv64=k64.nbytes + v64.nbytes, peak=peak))
    return rows


def prefill(length: int, n: int, repeat: int, rng) -> dict:
    q = rng.standard_normal((B, length, HQ, D), dtype=np.float32)
    k = rng.standard_normal((B, length, HKV, D), dtype=np.float32)
    v = rng.standard_normal((B, length, HKV, D), dtype=np.float32)
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    a @ b
    t_mm = best(lambda: a @ b, max(repeat, 5))
    attend(q, k, v, causal=True)
    t = best(lambda: attend(q, k, v, causal=True), repeat)
    peak = peak_bytes(lambda: attend(q, k, v, causal=True))
    return dict(length=length, t=t, flops=4 * B * HQ * length * length * D, n=n, t_mm=t_mm,
                mm_flops=2 * n**3, peak=peak, score=B * HQ * length * length * 8,
                product=B * HQ * length * length * D * 8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="decode at 8k and 32k, prefill at 512")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many timed calls (--quick: at most 2)")
    args = parser.parse_args()
    contexts = (8192, 32768) if args.quick else (32768, 131072)
    length = 512 if args.quick else 2048
    repeat = min(args.repeat, 2) if args.quick else args.repeat
    rng = np.random.default_rng(0)
    threads = {name: os.environ[name] for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS") if name in os.environ}
    print(f"numpy {np.__version__}, {platform.machine()}, {os.cpu_count()} CPUs, BLAS threads: "
          f"{threads or 'default'}, load average {os.getloadavg()[0]:.2f}; "
          f"best of {repeat} (baselines: best of {max(repeat, 5)})")
    print(f"GQA Hq={HQ} Hkv={HKV} D={D}, B={B}, causal (bottom-right)\n")
    checks = []  # (passed, description)

    q = rng.standard_normal((B, 1, HQ, D), dtype=np.float32)
    rows = [row for lk in contexts for row in decode(lk, q, repeat, rng)]
    print("Decode, Lq = 1. Baseline: float64 K q and p V per KV head (BLAS); ratio = oracle / baseline.\n")
    print("| Lk | K, V passed as | oracle s | tok/s | KV GB/s | baseline s | baseline GB/s (f64) "
          "| ratio | peak GiB | peak / f64 KV |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['lk'] // 1024}k | {r['dtype']} | {r['t']:.3f} | {1 / r['t']:.2f} | "
              f"{r['kv_bytes'] / r['t'] / 1e9:.2f} | {r['base']:.4f} | {r['kv64'] / r['base'] / 1e9:.1f} | "
              f"{r['t'] / r['base']:.1f} | {r['peak'] / GIB:.2f} | {r['peak'] / r['kv64']:.2f} |")
        units = r["peak"] / r["kv64"]
        checks.append((units < COPIES, f"decode {r['lk'] // 1024}k {r['dtype']}: peak {units:.2f} float64 K+V "
                                        f"< {COPIES} (no [Hq, Lq, Lk, D] intermediate)"))
    for dtype in ("float32", "float64"):
        small, large = (r for r in rows if r["dtype"] == dtype)
        growth, want = large["peak"] / small["peak"], large["lk"] / small["lk"]
        checks.append((growth <= 1.25 * want, f"decode {dtype}: peak grows {growth:.2f}x for {want:.0f}x keys "
                                              f"(linear: <= {1.25 * want:.1f}x)"))

    p = prefill(length, 2048, repeat, rng)
    rate, mm_rate = p["flops"] / p["t"] / 1e9, p["mm_flops"] / p["t_mm"] / 1e9
    print(f"\nPrefill, Lq = Lk = {p['length']}, float32 inputs. FLOPs = 4 B Hq Lq Lk D (full square; "
          f"causal does about half). Baseline: float64 {p['n']}^2 matmul.\n")
    print("| L | oracle s | GFLOP | GFLOP/s | matmul GFLOP/s | fraction of matmul | peak GiB | peak / scores |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| {p['length']} | {p['t']:.3f} | {p['flops'] / 1e9:.1f} | {rate:.1f} | {mm_rate:.1f} | "
          f"{rate / mm_rate:.3f} | {p['peak'] / GIB:.2f} | {p['peak'] / p['score']:.1f} |")
    checks.append((p["peak"] < p["product"], f"prefill {p['length']}: peak {p['peak'] / GIB:.2f} GiB < one "
                                             f"[Hq, Lq, Lk, D] float64 product ({p['product'] / GIB:.0f} GiB)"))

    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(f"\nprocess max RSS {maxrss / (1 << 20):.2f} GiB (inputs, baseline copies and the oracle's peak); "
          f"load average now {os.getloadavg()[0]:.2f}\n")
    for passed, text in checks:
        print(f"{'ok  ' if passed else 'FAIL'} {text}")
    if not all(passed for passed, _ in checks):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
