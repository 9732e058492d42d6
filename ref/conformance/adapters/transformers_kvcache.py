"""transformers 5.24's quantized KV cache (cache_utils.QuantizedCache) with its
optimum-quanto 0.2.7 backend (CPU) as an implementation of the kv.kivi ops.

  kv.kivi.quantize    QuantizedCache("quanto", axis_key=-1, axis_value=0, q_group_size=G,
                      nbits=b)'s layer quantizer (what update() stores) on x: the keys' axis
                      for the channel axis (quanto axis -1: G consecutive rows of the
                      flattened [B*H*T, D] for one channel), the values' for the token axis
                      (quanto axis 0: G consecutive elements of the flat tensor); the uint8
                      codes ungrouped to [B, H, T, D] (int32), scale as stored, mn = -shift
                      (quanto keeps the float shift -min)
  kv.kivi.dequantize  optimum.quanto's WeightQBitsTensor(codes, scale, shift = -mn).dequantize()
                      (scale * code - shift in the scale's dtype)
  kv.kivi.cache       the same QuantizedCache, one layer: prefill = the first update, decode
                      = each later update of one token; the counts read from the layer
                      (full = its residual buffer, quantized = the rest) and the view =
                      dequantized states | residual buffer
  kv.kivi.attend      torch's scaled_dot_product_attention (float32, GQA by repeating heads)
                      of q over the cache that update(k, v) leaves: its dequantized states

quanto quantizes 2 and 4 bits only (qint2, qint4); 8 bits raises NotImplementedError here.
The codec is KIVI's, bit for bit (min/max in the input's dtype, round half to even; quanto
rounds then clamps, the reference clamps then rounds, which agree on every finite input);
the cache is not: transformers quantizes the whole prompt at prefill and, once its residual
buffer reaches R tokens, re-quantizes the dequantized history together with the buffer
(spec/kv.md, "Engines"; the xfails file names each difference).

Run (spec/kv.md, "Engines"):
  python -m ref conform --impl ref.conformance.adapters.transformers_kvcache \
      --xfails-file ref/conformance/adapters/transformers_kvcache.xfails --ops 'kv.*'
with optimum-quanto 0.2.7 installed beside torch 2.13 and transformers 5.24.
"""

from __future__ import annotations

from importlib.metadata import version

import numpy as np
import torch
import transformers
from optimum.quanto import qint2, qint4
from optimum.quanto.tensor.grouped import group, ungroup
from optimum.quanto.tensor.weights.qbits import WeightQBitsTensor
from transformers import LlamaConfig
from transformers.cache_utils import QuantizedCache, QuantoQuantizedLayer

from ref.conformance.adapters import as_native

NAME = "transformers QuantizedCache, quanto backend (CPU)"
VERSION = f"transformers {transformers.__version__}, optimum-quanto {version('optimum-quanto')}, torch {torch.__version__}"

QUANTO_AXIS = {"channel": -1, "token": 0}  # KIVI's keys (groups of tokens) and values (groups of channels)
QTYPES = {2: qint2, 4: qint4}
TORCH_DTYPES = {"float16": torch.float16, "float32": torch.float32, "float64": torch.float64}


def _tensor(x) -> torch.Tensor:
    return torch.from_numpy(as_native(np.asarray(x)))


def _qtype(bits: int):
    if bits not in QTYPES:
        raise NotImplementedError(f"quanto's KV cache quantizes 2 or 4 bits, not {bits}")
    return QTYPES[bits]


def new_cache(*, bits_k: int = 2, bits_v: int = 2, group: int = 32, residual: int = 128) -> QuantizedCache:
    """One layer of QuantizedCache("quanto") with KIVI's axes: keys per channel, values per token."""
    if bits_k != bits_v:
        raise NotImplementedError("QuantizedCache has one nbits for keys and values")
    _qtype(bits_k)
    config = LlamaConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=1, num_key_value_heads=1)
    return QuantizedCache("quanto", config, nbits=bits_k, axis_key=QUANTO_AXIS["channel"],
                          axis_value=QUANTO_AXIS["token"], q_group_size=group, residual_length=residual)


def _per_group(t: torch.Tensor, qaxis: int, shape, g: int) -> np.ndarray:
    """A grouped scale or shift ([1, n] for axis -1, [n, 1] for axis 0) in KIVI's layout:
    [B, H, T/G, D] for the channel axis, [B, H, T, D/G] for the token axis."""
    grouped = group(torch.zeros(shape, dtype=t.dtype), qaxis, g)
    full = ungroup(t.expand(grouped.shape).contiguous(), qaxis, torch.Size(shape)).numpy()
    return full[:, :, ::g, :] if qaxis == -1 else full[..., ::g]


def _quantized(x: torch.Tensor, axis: str, bits: int, g: int):
    """What the cache's layer stores for keys (channel) or values (token): its own
    _quantize (quanto's MaxOptimizer, then quantize_weight), called as update() calls it."""
    layer = QuantoQuantizedLayer(nbits=bits, axis_key=QUANTO_AXIS["channel"], axis_value=QUANTO_AXIS["token"],
                                 q_group_size=g, residual_length=g)
    return layer._quantize(x.contiguous(), axis=layer.axis_key if axis == "channel" else layer.axis_value)


def round_trip(x, *, axis: str = "channel", bits: int = 2, group: int = 32) -> np.ndarray:
    """x quantized and dequantized as the cache stores it, for any shape quanto accepts
    (its groups then need not be KIVI's)."""
    return _quantized(_tensor(x), axis, _qtype(bits).bits, group).dequantize().numpy()


def quantize(x, *, axis: str = "channel", bits: int = 2, group: int = 32):
    _qtype(bits)
    t = _tensor(x)
    if t.numel() == 0:  # quanto's group(): "Group size (G) must be a divisor of (0)"
        raise NotImplementedError("quanto refuses a tensor with no elements")
    q = _quantized(t, axis, bits, group)
    data = q._data.unpack() if hasattr(q._data, "unpack") else q._data
    qaxis = QUANTO_AXIS[axis]
    codes = ungroup(data, qaxis, t.shape).numpy().astype(np.int32)
    scale = _per_group(q._scale, qaxis, t.shape, group)
    mn = -_per_group(q._shift, qaxis, t.shape, group)
    return codes, scale, mn


def _grouped_param(p: np.ndarray, qaxis: int, shape, g: int) -> torch.Tensor:
    """KIVI's [B, H, T/G, D] or [B, H, T, D/G] scale (or mn) as quanto stores it."""
    full = np.repeat(p, g, axis=2 if qaxis == -1 else 3)  # [B, H, T, D]
    grouped = group(_tensor(full), qaxis, g)
    return grouped[:1, :].contiguous() if qaxis == -1 else grouped[:, :1].contiguous()


def dequantize(codes, scale, mn, *, axis: str = "channel", bits: int = 2, group: int = 32):
    qaxis = QUANTO_AXIS[axis]
    codes, scale, mn = np.asarray(codes), np.asarray(scale), np.asarray(mn)
    b, h, t, d = codes.shape
    want = (b, h, t // group, d) if axis == "channel" else (b, h, t, d // group)
    if scale.shape != want or mn.shape != want:  # this adapter's layout conversion needs KIVI's shapes
        raise ValueError(f"scale, mn: expected {want} for codes {codes.shape}, got {scale.shape}, {mn.shape}")
    c = _tensor(codes.astype(np.uint8))
    s = _grouped_param(np.asarray(scale), qaxis, c.shape, group)
    shift = _grouped_param(-np.asarray(mn), qaxis, c.shape, group)
    q = WeightQBitsTensor(_qtype(bits), qaxis, group, c.shape, c.stride(), group_codes(c, qaxis, group), s, shift)
    return q.dequantize().numpy()


def group_codes(c: torch.Tensor, qaxis: int, g: int) -> torch.Tensor:
    return group(c, qaxis, g).contiguous()


def _counts(layer) -> dict:
    full = int(layer.keys.shape[-2]) if layer.keys.dim() == 4 else 0
    quantized = int(layer.cumulative_length) - full
    return {"quantized_keys": quantized, "full_keys": full, "quantized_values": quantized, "full_values": full}


class Cache:
    """kv.kivi.cache through QuantizedCache: prefill then one-token decodes."""

    def __init__(self, *, bits_k: int = 2, bits_v: int = 2, group: int = 32, residual: int = 128,
                 dtype: str = "float16"):
        if dtype not in TORCH_DTYPES:
            raise ValueError(f"dtype: {dtype!r}")
        self.dtype = TORCH_DTYPES[dtype]
        self.cache = new_cache(bits_k=bits_k, bits_v=bits_v, group=group, residual=residual)
        self.started = False

    def _pair(self, keys, values, tokens=None):
        k, v = np.asarray(keys), np.asarray(values)
        if k.ndim != 4 or k.shape != v.shape or (tokens is not None and k.shape[2] != tokens):
            raise ValueError(f"keys, values: expected [B, H, T, D] of one shape, got {k.shape} and {v.shape}")
        return _tensor(k).to(self.dtype), _tensor(v).to(self.dtype)

    def prefill(self, keys, values) -> dict:
        if self.started:
            raise ValueError("keys: the cache is already prefilled")
        k, v = self._pair(keys, values)
        self.cache.update(k, v, 0)
        self.started = True
        return self.observe()

    def decode(self, keys, values) -> dict:
        if not self.started:
            raise ValueError("keys: decode before prefill")
        k, v = self._pair(keys, values, tokens=1)
        self.cache.update(k, v, 0)
        return self.observe()

    def view(self):
        layer = self.cache.layers[0]
        keys, values = layer._quantized_keys.dequantize(), layer._quantized_values.dequantize()
        if layer.keys.dim() == 4:
            keys, values = torch.cat([keys, layer.keys], dim=-2), torch.cat([values, layer.values], dim=-2)
        return keys.numpy(), values.numpy()

    def observe(self) -> dict:
        keys, values = self.view()
        return {**_counts(self.cache.layers[0]), "keys": keys.astype(np.float64).tolist(),
                "values": values.astype(np.float64).tolist()}


def attend(q, k, v, *, bits_k: int = 2, bits_v: int = 2, group: int = 32, residual: int = 128, scale=None):
    kt, vt = _tensor(k), _tensor(v)
    cache = new_cache(bits_k=bits_k, bits_v=bits_v, group=group, residual=residual)
    cache.update(kt, vt, 0)
    layer = cache.layers[0]
    keys, values = layer._quantized_keys.dequantize().float(), layer._quantized_values.dequantize().float()
    qt = _tensor(q).float()
    rep = qt.shape[1] // keys.shape[1]
    keys, values = keys.repeat_interleave(rep, dim=1), values.repeat_interleave(rep, dim=1)
    out = torch.nn.functional.scaled_dot_product_attention(qt, keys, values, scale=scale)
    return out.numpy()


OPS = {"kv.kivi.quantize": quantize, "kv.kivi.dequantize": dequantize, "kv.kivi.cache": Cache,
       "kv.kivi.attend": attend}
VARIANTS = {"kv.kivi.quantize": {"axis": ["channel", "token"], "bits": [2, 4], "group": [32, 16, 8, 4, 2, 128]},
            "kv.kivi.dequantize": {"axis": ["channel", "token"], "bits": [2, 4], "group": [32, 16, 8, 4, 2, 128]},
            "kv.kivi.cache": {"bits_k": [2, 4], "bits_v": [2, 4], "group": [32, 2, 4, 8, 16],
                              "residual": [128, 4, 8, 16, 32], "dtype": ["float16", "float32", "float64"]},
            "kv.kivi.attend": {"bits_k": [2, 4], "bits_v": [2, 4]}}
PRECISION = {"kv.kivi.attend": "float32"}
