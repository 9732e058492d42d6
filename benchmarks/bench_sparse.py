"""Block-sparse decode against dense attention on the same cache, in the same run.

    python benchmarks/bench_sparse.py [--quick] [--repeat 3]

One decode query (Lq = 1) of GQA 8 / 2 (head dim 128) against T = 131072 cached tokens
(--quick: 32768), float32 values. Key blocks of 64 tokens; each KV head's list (H = Hkv,
NSA's and MoBA's grouping) names 1/16 of the blocks, drawn at random without repeats,
with the count as flex's kv_num_blocks. Timed, alternately so that a change of load falls
on all three:

  (a) ref.sparse.block.attend: the oracle, a gather of the selected blocks and
      ref.attention.attend on them (float64);
  (b) ref.attention.attend on the whole cache (the dense baseline, float64);
  (c) the default run's kernel (ref.conformance.adapters.numpy_sparse_block, float32
      online softmax over the slots).

Ratio = time / time of (b); reading 1/16 of the cache, (a) should approach 1/16 = 0.0625.
Times are the best of --repeat calls after a warm-up call. Prints a markdown table.
Run on demand; never part of the tests.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

from ref.attention import attend
from ref.conformance.adapters import numpy_sparse_block
from ref.sparse import block

HQ, HKV, D, BLOCK, FRACTION = 8, 2, 128, 64, 16


def _inputs(t: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((1, 1, HQ, D), np.float32)
    k = rng.standard_normal((1, t, HKV, D), np.float32)
    v = rng.standard_normal((1, t, HKV, D), np.float32)
    nb = t // BLOCK
    s = nb // FRACTION
    idx = np.stack([rng.permutation(nb)[:s] for _ in range(HKV)]).astype(np.int32)[None, :, None, :]  # [1, Hkv, 1, S]
    counts = np.full((1, HKV, 1), s, np.int32)
    return {"q": q, "k": k, "v": v, "block_indices": idx, "counts": counts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="T = 32768 instead of 131072")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    t = 32768 if args.quick else 131072
    x = _inputs(t)
    params = dict(block_size_q=1, block_size_k=BLOCK, causal=True)
    nb = t // BLOCK
    mask = block.block_mask(x["block_indices"], x["counts"], lq=1, lk=t, block_size_k=BLOCK, causal=True)
    dense_mask = mask[:, np.arange(HQ) // (HQ // HKV)]  # [1, Hq, 1, T]: the same selection, for checking
    runs = {
        "ref.sparse.block.attend (gather, float64)": lambda: block.attend(**x, **params),
        "ref.attention.attend, dense (float64)": lambda: attend(x["q"], x["k"], x["v"], causal=True),
        "default kernel numpy_sparse_block (float32)": lambda: numpy_sparse_block._attend(**x, **params),
    }
    sparse_out, _ = runs["ref.sparse.block.attend (gather, float64)"]()
    masked_out, _ = attend(x["q"], x["k"], x["v"], mask=dense_mask, causal=True)
    assert np.allclose(sparse_out, masked_out, rtol=1e-10, atol=1e-12), "the gather disagrees with masked attend"
    for fn in runs.values():  # warm-up
        fn()
    times = {name: float("inf") for name in runs}
    for _ in range(args.repeat):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            times[name] = min(times[name], time.perf_counter() - start)
    base = times["ref.attention.attend, dense (float64)"]
    print(f"decode, Lq = 1, T = {t}, GQA {HQ}/{HKV}, d = {D}, blocks of {BLOCK}: {nb // FRACTION} of {nb} blocks "
          f"per KV head (1/{FRACTION}); numpy {np.__version__}, {platform.machine()}, {os.cpu_count()} cores, "
          f"best of {args.repeat}\n")
    print("| run | s | ratio to dense |")
    print("|---|---|---|")
    for name, seconds in times.items():
        print(f"| {name} | {seconds:.4f} | {seconds / base:.3f} |")
    print(f"\nideal ratio (keys read): 1/{FRACTION} = {1 / FRACTION:.4f}")


if __name__ == "__main__":
    main()
