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
codec time / baseline time, the two timed alternately (a change of load falls on
both); M elem/s = elements per codec second.

Decode attention: one decode query (Lq = 1) of GQA 32 / 8 (head dim 128) against
T = 131072 cached tokens (--quick: 32768). The cache is encoded once (not timed);
timed are (a) decoding the stored cache, laying it out as attend takes it ([B, T, H, D],
one contiguous copy) and attending (`decode` + ref.attention.attend: what a reference
decode step costs from the codes) and (b) ref.attention.attend on the already
dequantized cache in its layout (the baseline). Ratio = (a) / (b). Where a codec also has its own
attention oracle (kv.kivi.attend: quantize + attend in one call) it is timed too.

Times are the best of --repeat calls after a warm-up call (decode: (a) and (b)
alternating, so that a change of load falls on both). Prints markdown tables.
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
from ref.kv import kivi, kivi_cache, oscar, oscar_rotation, qjl, synthetic
from ref.kv import turboquant as tq
from ref.quant import rtn

HQ, HKV, D = 32, 8, 128


def _rtn(bits: int) -> tuple[Callable, Callable]:
    """Per-token RTN (the comparison's baseline), groups of 128 channels."""

    def encode(x, role):
        return rtn.quantize_groups(x, bits=bits, group=128, zero_range="minmax")

    def decode(state):
        codes, scales, zeros = state
        return rtn.dequantize_groups(codes, scales, zeros, group=128)

    return encode, decode


def _kivi(bits: int) -> tuple[Callable, Callable]:
    """KIVI's codec alone (no residual window): keys per channel, values per token, G = 32."""

    def encode(x, role):
        return kivi.encode(x, axis="channel" if role == "k" else "token", bits=bits, group=32)

    return encode, kivi.decode


def _qjl(m: int) -> tuple[Callable, Callable]:
    """QJL keys (m signs and the norm); values by KIVI-2 per token (the reference's pairing)."""
    s = synthetic.projection(m, D, seed=3)

    def encode(x, role):
        return qjl.encode(x, s) if role == "k" else kivi.encode(x, axis="token", bits=2, group=32)

    def decode(state):
        return qjl.decode(state, s) if isinstance(state, dict) else kivi.decode(state)

    return encode, decode


def _turbo(bits: int, variant: str) -> tuple[Callable, Callable]:
    """TurboQuant: keys by the variant, values by TurboQuant_mse."""
    pk, pv, s = synthetic.rotation(D, seed=1), synthetic.rotation(D, seed=2), synthetic.projection(D, D, seed=3)

    def encode(x, role):
        if role == "k" and variant == "prod":
            return "prod", tq.quantize_prod(x, pk, s, bits=bits)
        return "mse", tq.quantize_mse(x, pk if role == "k" else pv, bits=bits), role

    def decode(state):
        if state[0] == "prod":
            return tq.dequantize_prod(*state[1], pk, s, bits=bits)
        return tq.dequantize_mse(*state[1], pk if state[2] == "k" else pv, bits=bits)

    return encode, decode


def _oscar() -> tuple[Callable, Callable]:
    """OSCAR INT2: rotations calibrated on 256 tokens of the synthetic generator, clip
    0.96 (keys) and 0.92 (values), the first 64 and last 256 tokens kept."""
    cal = synthetic.context(kv_heads=HKV, group=HQ // HKV, tokens=0, head_dim=D, calibration=256)
    c_k, c_v = oscar_rotation.covariances(cal.calibration_q, cal.calibration_k, cal.calibration_v)
    r_k, r_v = oscar_rotation.rotation(c_k), oscar_rotation.rotation(c_v)

    def encode(x, role):
        return oscar.encode(x, r_k if role == "k" else r_v, clip_ratio=0.96 if role == "k" else 0.92)

    return encode, oscar.decode


def codecs() -> dict[str, tuple[Callable, Callable, type]]:
    """name -> (encode(x, role "k" or "v") -> state, decode(state) -> x', input dtype)."""
    return {
        "RTN-2 per token (g 128)": (*_rtn(2), np.float32),
        "RTN-4 per token (g 128)": (*_rtn(4), np.float32),
        "KIVI-2 (g 32) float16": (*_kivi(2), np.float16),
        "KIVI-2 (g 32)": (*_kivi(2), np.float32),
        "KIVI-4 (g 32)": (*_kivi(4), np.float32),
        "QJL m 256": (*_qjl(256), np.float32),
        "TurboQuant-mse 2-bit": (*_turbo(2, "mse"), np.float32),
        "TurboQuant-prod 3-bit": (*_turbo(3, "prod"), np.float32),
        "OSCAR INT2": (*_oscar(), np.float32),
    }


def _keys(tokens: int) -> np.ndarray:
    ctx = synthetic.context(kv_heads=HKV, group=1, tokens=tokens, head_dim=D, queries=1, calibration=0, recent=0)
    return ctx.k.astype(np.float32)  # [1, H, T, D]


def bench_encode(tokens: int, repeat: int) -> None:
    x = _keys(tokens)
    n = x.size
    print(f"\nEncode, keys [1, {HKV}, {tokens}, {D}] ({n / 1e6:.1f}M elements); baseline "
          "intgroup.quantize (4-bit, g 128) of the same float32 tensor, timed alternately with each codec\n")
    print("| codec | dtype | s | M elem/s | intgroup s | ratio to intgroup |")
    print("|---|---|---|---|---|---|")
    for name, (encode, _, dtype) in codecs().items():
        xi = x.astype(dtype)
        encode(xi, "k")  # warm-up
        base, t = _interleaved(lambda: intgroup.quantize(x, bits=4, group=128), lambda: encode(xi, "k"), repeat)
        print(f"| {name} | {np.dtype(dtype).name} | {t:.3f} | {n / t / 1e6:.1f} | {base:.3f} | {t / base:.2f} |")


def _layout(x):
    """[B, H, T, D] -> attend's [B, T, H, D], contiguous."""
    return np.ascontiguousarray(np.swapaxes(x, 1, 2))


def _attend(q, k, v):
    """attend on keys and values already in its layout [B, T, H, D]."""
    out, _ = attend(q, k, v)
    return out


def _interleaved(base, fn, repeat: int) -> tuple[float, float]:
    """The best of `repeat` runs of each, alternating, so that a change of the
    machine's load falls on both."""
    times_base, times = [], []
    for _ in range(repeat):
        times_base.append(best(base, 1))
        times.append(best(fn, 1))
    return min(times_base), min(times)


def bench_decode(tokens: int, repeat: int, only: str | None) -> None:
    rng = np.random.default_rng(1)
    k = _keys(tokens)
    v = rng.standard_normal(k.shape).astype(np.float32)
    q = rng.standard_normal((1, 1, HQ, D)).astype(np.float32)  # attend's layout [B, Lq, Hq, D]
    print(f"\nDecode attention, Lq = 1, GQA {HQ}/{HKV}, D = {D}, T = {tokens}\n")
    print("| codec | decode + attend s | attend on dequantized s | ratio | tok/s |")
    print("|---|---|---|---|---|")
    for name, (encode, decode, dtype) in codecs().items():
        if only and only not in name:
            continue
        ks, vs = encode(k.astype(dtype), "k"), encode(v.astype(dtype), "v")
        kd, vd = _layout(decode(ks)), _layout(decode(vs))
        _attend(q, kd, vd)  # warm-up
        t_base, t = _interleaved(lambda: _attend(q, kd, vd),
                                 lambda: _attend(q, _layout(decode(ks)), _layout(decode(vs))), repeat)
        print(f"| {name} | {t:.3f} | {t_base:.3f} | {t / t_base:.2f} | {1 / t:.2f} |")
        ks = vs = kd = vd = None  # freed before the next codec
    if only and "kivi" not in only.lower():
        return
    qc = np.swapaxes(q, 1, 2)  # the cache layout [B, Hq, Lq, D]
    kivi_cache.attend(qc, k, v, bits_k=2, bits_v=2)  # warm-up
    t = best(lambda: kivi_cache.attend(qc, k, v, bits_k=2, bits_v=2), repeat)
    print(f"| kv.kivi.attend oracle (KIVI-2, R 128: quantize + attend, float32 in) | {t:.3f} | | | {1 / t:.2f} |")


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
