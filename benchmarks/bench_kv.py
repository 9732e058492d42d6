"""The KV-cache codecs' oracles: encode throughput against a block-codec oracle, and
decode attention over a 128k-token quantized cache against `attend` on the
dequantized cache, each as a ratio measured in the same run.

    python benchmarks/bench_kv.py [--quick] [--repeat 3]

Encode: keys of shape [B, H, T, D] = [1, 8, 8192, 128] (8M elements; --quick: T = 2048),
Gaussian with 4 outlier channels per head (ref.kv.synthetic.context's generator),
float32 (KIVI runs in the input's dtype: float16 too, as its reference does). Each
codec encodes the whole tensor; baseline: ref.formats.intgroup.quantize (4-bit,
asymmetric, groups of 128 consecutive channels of a token: the block codec of
ref.formats closest to a per-token KV codec) on the same float32 tensor. Ratio =
codec time / baseline time; M elem/s = elements per codec second.

Decode attention: one decode query (Lq = 1) of GQA 32 / 8 (head dim 128) against
T = 131072 cached tokens (--quick: 32768). The cache is encoded once (not timed);
timed are (a) decoding the stored cache and attending (`decode` + ref.attention.attend:
what a reference decode step costs) and (b) ref.attention.attend on the already
dequantized cache (the baseline). Ratio = (a) / (b). Where a codec also has its own
attention oracle (kv.kivi.attend: quantize + attend in one call) it is timed too.

Times are the best of --repeat calls after a warm-up call. Prints markdown tables.
Run on demand; never part of the tests.
"""

from __future__ import annotations

import argparse
import os
import platform
from collections.abc import Callable

import numpy as np
from _timing import best

from ref.attention import attend
from ref.formats import intgroup
from ref.kv import synthetic
from ref.quant import rtn

HQ, HKV, D = 32, 8, 128


def _rtn(bits: int) -> tuple[Callable, Callable]:
    """Per-token RTN (the comparison's baseline), groups of 128 channels."""

    def encode(x):
        return rtn.quantize_groups(x, bits=bits, group=128, zero_range="minmax")

    def decode(state):
        codes, scales, zeros = state
        return rtn.dequantize_groups(codes, scales, zeros, group=128)

    return encode, decode


def codecs() -> dict[str, tuple[Callable, Callable, type]]:
    """name -> (encode(x) -> state, decode(state) -> x', input dtype)."""
    out = {"RTN-2 per token (g 128)": (*_rtn(2), np.float32), "RTN-4 per token (g 128)": (*_rtn(4), np.float32)}
    return out


def _keys(tokens: int) -> np.ndarray:
    ctx = synthetic.context(kv_heads=HKV, group=1, tokens=tokens, head_dim=D, queries=1, calibration=0, recent=0)
    return ctx.k.astype(np.float32)  # [1, H, T, D]


def bench_encode(tokens: int, repeat: int) -> None:
    x = _keys(tokens)
    n = x.size
    base = best(lambda: intgroup.quantize(x, bits=4, group=128), repeat)
    print(f"\nEncode, keys [1, {HKV}, {tokens}, {D}] ({n / 1e6:.1f}M elements); baseline "
          f"intgroup.quantize (4-bit, g 128): {base:.3f} s, {n / base / 1e6:.1f} M elem/s\n")
    print("| codec | dtype | s | M elem/s | ratio to intgroup |")
    print("|---|---|---|---|---|")
    for name, (encode, _, dtype) in codecs().items():
        xi = x.astype(dtype)
        encode(xi)  # warm-up
        t = best(lambda: encode(xi), repeat)
        print(f"| {name} | {np.dtype(dtype).name} | {t:.3f} | {n / t / 1e6:.1f} | {t / base:.2f} |")


def _attend(q, k, v):
    out, _ = attend(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3))
    return out


def bench_decode(tokens: int, repeat: int, only: str | None) -> None:
    rng = np.random.default_rng(1)
    k = _keys(tokens)
    v = rng.standard_normal(k.shape).astype(np.float32)
    q = rng.standard_normal((1, HQ, 1, D)).astype(np.float32)
    print(f"\nDecode attention, Lq = 1, GQA {HQ}/{HKV}, D = {D}, T = {tokens}\n")
    print("| codec | decode + attend s | attend on dequantized s | ratio | tok/s |")
    print("|---|---|---|---|---|")
    for name, (encode, decode, dtype) in codecs().items():
        if only and only not in name:
            continue
        ks, vs = encode(k.astype(dtype)), encode(v.astype(dtype))
        kd, vd = decode(ks), decode(vs)
        _attend(q, kd, vd)  # warm-up
        t_base = best(lambda: _attend(q, kd, vd), repeat)
        t = best(lambda: _attend(q, decode(ks), decode(vs)), repeat)
        print(f"| {name} | {t:.3f} | {t_base:.3f} | {t / t_base:.2f} | {1 / t:.2f} |")
        del ks, vs, kd, vd


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="T = 2048 (encode) and 32768 (decode)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--decode-only", default=None, help="only the decode rows whose name contains this")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}, numpy {np.__version__}, {platform.machine()}")
    bench_encode(2048 if args.quick else 8192, args.repeat)
    bench_decode(32768 if args.quick else 131072, args.repeat, args.decode_only)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
