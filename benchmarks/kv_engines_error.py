"""What transformers' quantized KV cache loses, next to KIVI's oracle (spec/kv.md, "Engines").

One layer, B = 1, 2 KV heads, 4 query heads, T = 1024 prompt tokens, head dim 128, group 32,
residual 128; keys and values standard normal (seed 0) with key channels 3, 17, 64 and 100
times 16; 8 queries standard normal. For each cache: the relative mean squared error of the
keys and values it holds after the prompt (what the next decode step reads) and the relative
L2 error of float64 attention of the queries over them, against the exact cache.

Needs torch, transformers, optimum-quanto and hqq (the quant engines environment):
  python benchmarks/kv_engines_error.py
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from transformers import LlamaConfig
from transformers.cache_utils import QuantizedCache

from ref.attention import attend
from ref.kv import kivi, kivi_cache

B, H, T, D, HQ, GROUP, RESIDUAL = 1, 2, 1024, 128, 4, 32, 128
ENGINES = (("quanto", -1, 0), ("quanto", 0, 0), ("hqq", 1, 1), ("hqq", 0, 0))


def inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((B, H, T, D)).astype(np.float32)
    k[..., [3, 17, 64, 100]] *= 16
    v = rng.standard_normal((B, H, T, D)).astype(np.float32)
    q = rng.standard_normal((B, HQ, 8, D)).astype(np.float32)
    return q, k, v


def attention(q, keys, values):
    out, _ = attend(*(np.asarray(a, np.float64).transpose(0, 2, 1, 3) for a in (q, keys, values)))
    return out


def engine_cache(backend: str, axis_key: int, axis_value: int, bits: int, k, v):
    """What the next decode step reads of the prompt: update(k, v), then one more update."""
    config = LlamaConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=1, num_key_value_heads=1)
    cache = QuantizedCache(backend, config, nbits=bits, axis_key=axis_key, axis_value=axis_value,
                           q_group_size=GROUP, residual_length=RESIDUAL)
    cache.update(torch.from_numpy(k), torch.from_numpy(v), 0)
    keys, values = cache.update(torch.zeros(B, H, 1, D), torch.zeros(B, H, 1, D), 0)
    return keys[:, :, :T].numpy(), values[:, :, :T].numpy()


def rows(bits: int):
    q, k, v = inputs()
    exact = attention(q, k, v)

    def row(name, keys, values):
        def mse(a, b):
            return float(np.mean((a.astype(np.float64) - b) ** 2) / np.mean(np.asarray(b, np.float64) ** 2))
        err = float(np.linalg.norm(attention(q, keys, values) - exact) / np.linalg.norm(exact))
        return name, bits, mse(keys, k), mse(values, v), err

    yield row("KIVI oracle (prefill split, R = 128)",
              *kivi_cache.dequantized_cache(k, v, bits_k=bits, bits_v=bits, group=GROUP, residual=RESIDUAL))
    yield row("KIVI codec, every token quantized",
              *(kivi.dequantize(*kivi.quantize(x, axis=axis, bits=bits, group=GROUP), axis=axis, bits=bits,
                                group=GROUP) for x, axis in ((k, "channel"), (v, "token"))))
    for backend, ak, av in ENGINES:
        yield row(f"QuantizedCache {backend}, axis_key={ak}, axis_value={av}", *engine_cache(backend, ak, av, bits, k, v))


def main() -> None:
    warnings.simplefilter("ignore")
    print("| cache | bits | K rel. MSE | V rel. MSE | attention rel. L2 |")
    print("|---|---|---|---|---|")
    for bits in (2, 4):
        for name, b, mk, mv, err in rows(bits):
            print(f"| {name} | {b} | {mk:.4f} | {mv:.4f} | {err:.4f} |")


if __name__ == "__main__":
    main()
