"""The paged-attention oracle `paged_attention` at decode, against the contiguous
`attend` on the same keys, measured in the same run.

    python benchmarks/bench_cache_paged_attention.py [--quick] [--repeat 3]

Shapes: GQA with 32 query heads over 8 KV heads, head dim 128, one sequence of
32k keys (--quick: 8k) in blocks of 16 slots scattered over a pool with spare
blocks (the table a shuffled list of block ids), float32 caches whose unowned
slots hold NaN, one decode query. The contiguous baseline is `attend` on the
sequence's keys and values as one [1, Lk, Hkv, D] array each (also float32), the
query the same. Ratio = paged time / contiguous time; the target is 2 (the gather
through the block table is one fancy-indexed copy of K and V, against attention's
own float64 passes over them). The outputs are checked equal bit for bit.

Times are the best of --repeat calls after a warm-up call. Prints a markdown table,
then the check; exits 1 if the ratio exceeds 2. Run on demand; never part of the
tests.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from _timing import best

from ref.attention.attend import attend
from ref.cache.paged_attention import paged_attention

HQ, HKV, D, BLOCK = 32, 8, 128, 16
TARGET = 2.0


def _case(lk: int, rng: np.random.Generator):
    blocks = -(-lk // BLOCK)
    pool = blocks + 64  # spare blocks no table lists
    table = 1 + rng.permutation(pool - 1)[:blocks]  # block 0 kept as a null block
    k = rng.standard_normal((lk, HKV, D), dtype=np.float32)
    v = rng.standard_normal((lk, HKV, D), dtype=np.float32)
    k_cache = np.full((pool, BLOCK, HKV, D), np.nan, np.float32)
    v_cache = np.full((pool, BLOCK, HKV, D), np.nan, np.float32)
    pos = np.arange(lk)
    k_cache[table[pos // BLOCK], pos % BLOCK] = k
    v_cache[table[pos // BLOCK], pos % BLOCK] = v
    q = rng.standard_normal((1, HQ, D), dtype=np.float32)
    paged = {"q": q, "key_cache": k_cache, "value_cache": v_cache, "block_tables": table[None].astype(np.int32),
             "seq_lens": np.array([lk], np.int32), "cu_seqlens_q": np.array([0, 1], np.int32)}
    return paged, (q[None], k[None], v[None])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8k keys instead of 32k")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    lk = 8192 if args.quick else 32768
    rng = np.random.default_rng(0)
    paged, (q, k, v) = _case(lk, rng)
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    out_p, lse_p = paged_attention(**paged)  # warm-up, and the results checked below
    out_c, lse_c = attend(q, k, v, causal=True)
    t_paged = best(lambda: paged_attention(**paged), args.repeat)
    t_contig = best(lambda: attend(q, k, v, causal=True), args.repeat)
    ratio = t_paged / t_contig
    print(f"load average after: {os.getloadavg()[0]:.2f}\n")
    print("| context | paged s | contiguous attend s | ratio |")
    print("|---|---|---|---|")
    print(f"| {lk} | {t_paged:.4f} | {t_contig:.4f} | {ratio:.2f} |\n")
    same = np.array_equal(out_p, out_c[0]) and np.array_equal(lse_p, lse_c[0])
    print(f"outputs equal bit for bit: {same}")
    print(f"ratio {ratio:.2f} {'<=' if ratio <= TARGET else '>'} target {TARGET}")
    return 0 if same and ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
