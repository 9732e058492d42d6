"""KIVI's reference code (jy-yuan/KIVI, quant/new_pack.py; read at 876b4d2) as an
implementation of the kv.kivi codec ops, on CPU.

The file imports triton at its top, so only its pure-torch functions are taken: the
module is parsed and its top-level defs quant_and_pack_kcache, quant_and_pack_vcache,
unpack_and_dequant_kcache, unpack_and_dequant_vcache, pack_tensor and unpack_tensor are
executed with torch in their globals. KIVI is a repository, not a package, so this
adapter needs a checkout: set KIVI_NEW_PACK to the path of its quant/new_pack.py. CI
cannot fetch repositories; the findings of the runs in a session are in spec/kv.md
("Engines").

  kv.kivi.quantize    quant_and_pack_kcache (channel) / quant_and_pack_vcache (token), the
                      words unpacked with unpack_tensor; scale and mn without the
                      reference's kept group axis
  kv.kivi.dequantize  pack_tensor, then unpack_and_dequant_kcache / _vcache
  kv.kivi.pack        pack_tensor along tokens (channel) or channels (token)
  kv.kivi.unpack      unpack_tensor (int16 codes, returned as int32)
  kv.kivi.cache       models/llama_kivi.py (beside quant/ in the checkout): LlamaAttention_KIVI
                      executed from its source, fed the given keys and values through its
                      projections (RoPE as the identity), its past_key_value tuple read back
                      after each forward; its Triton quantizer is replaced by the reference's
                      pure-torch quant_and_pack_vcache (the same min/max arithmetic) and its
                      CUDA gemv by a dequantize-then-matmul (the attention output is not
                      observed; the cache is)

The reference packs as it quantizes, so it asserts that the packed axis holds a
multiple of 32 / b codes: a tensor that is not is declined (NotImplementedError), and
so is a cache whose R (keys) or D (values) is not.

Run (spec/kv.md, "Engines"):
  KIVI_NEW_PACK=path/to/KIVI/quant/new_pack.py python -m ref conform \
      --impl ref.conformance.adapters.kivi_reference \
      --xfails-file ref/conformance/adapters/kivi_reference.xfails --ops 'kv.kivi.*'
"""

from __future__ import annotations

import ast
import math
import os
from pathlib import Path

import numpy as np
import torch

from ref.conformance.adapters import as_native

SOURCE = os.environ.get("KIVI_NEW_PACK", "")
FUNCTIONS = ("quant_and_pack_kcache", "quant_and_pack_vcache", "unpack_and_dequant_kcache",
             "unpack_and_dequant_vcache", "pack_tensor", "unpack_tensor")
PACK_DIM = {"channel": 2, "token": 3}
GROUP_DIM = {"channel": 3, "token": 4}  # where the reference keeps a length-1 axis in scale and mn


def load(path: str) -> dict:
    """The reference's pure-torch functions from the file at `path`, by name."""
    if not path or not Path(path).is_file():
        raise ImportError("kivi_reference: set KIVI_NEW_PACK to the path of KIVI's quant/new_pack.py "
                          f"(got {path!r})")
    tree = ast.parse(Path(path).read_text(), filename=path)
    defs = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in FUNCTIONS]
    missing = set(FUNCTIONS) - {node.name for node in defs}
    if missing:
        raise ImportError(f"kivi_reference: {path} has no {sorted(missing)}")
    scope = {"torch": torch, "np": np, "math": math}
    exec(compile(ast.Module(defs, type_ignores=[]), path, "exec"), scope)
    return {name: scope[name] for name in FUNCTIONS}


REF = load(SOURCE)
NAME = "KIVI reference quant/new_pack.py (pure-torch functions, CPU)"
VERSION = f"jy-yuan/KIVI quant/new_pack.py from {SOURCE}, torch {torch.__version__}"


def _tensor(x) -> torch.Tensor:
    return torch.from_numpy(as_native(np.asarray(x)))


def _packable(n: int, bits: int) -> None:
    if bits not in (2, 4, 8) or n % (32 // bits):
        raise NotImplementedError(f"the reference packs as it quantizes: {n} codes is not a multiple of "
                                  f"{32 // max(bits, 1)} at {bits} bits")


def quantize(x, *, axis: str = "channel", bits: int = 2, group: int = 32):
    t = _tensor(x)
    if t.ndim == 4:
        _packable(t.shape[PACK_DIM[axis]], bits)
    fn = REF["quant_and_pack_kcache" if axis == "channel" else "quant_and_pack_vcache"]
    code, scale, mn = fn(t.clone(), group, bits)
    codes = REF["unpack_tensor"](code, bits, pack_dim=PACK_DIM[axis])
    dim = GROUP_DIM[axis]
    return codes.numpy().astype(np.int32), scale.squeeze(dim).numpy(), mn.squeeze(dim).numpy()


def dequantize(codes, scale, mn, *, axis: str = "channel", bits: int = 2, group: int = 32):
    c = _tensor(np.asarray(codes).astype(np.int32))
    _packable(c.shape[PACK_DIM[axis]], bits)
    words = REF["pack_tensor"](c, bits, PACK_DIM[axis])
    dim = GROUP_DIM[axis]
    s, m = _tensor(scale).unsqueeze(dim), _tensor(mn).unsqueeze(dim)
    fn = REF["unpack_and_dequant_kcache" if axis == "channel" else "unpack_and_dequant_vcache"]
    return fn(words, s, m, group, bits).numpy()


def pack(codes, *, axis: str = "channel", bits: int = 2):
    c = _tensor(codes)
    if not c.is_floating_point():
        c = c.to(torch.int32)
    return REF["pack_tensor"](c, bits, PACK_DIM[axis]).numpy()


def unpack(words, *, axis: str = "channel", bits: int = 2):
    return REF["unpack_tensor"](_tensor(words), bits, PACK_DIM[axis]).numpy().astype(np.int32)


# --- the cache: models/llama_kivi.py's LlamaAttention_KIVI.forward, which keeps it -----------------

def _quantize_last_dim(data, group_size, bit):
    """triton_quantize_and_pack_along_last_dim's arithmetic (min and max of G consecutive
    elements of the last axis, then quant_and_pack_vcache's steps) with the reference's
    own pure-torch quant_and_pack_vcache: -> (words, scale, mn), scale and mn [..., n/G]."""
    code, scale, mn = REF["quant_and_pack_vcache"](data.contiguous(), group_size, bit)
    return code, scale.squeeze(-1), mn.squeeze(-1)


def _dequantize_last_dim(words, scale, mn, group_size, bits):
    return REF["unpack_and_dequant_vcache"](words, scale.unsqueeze(-1), mn.unsqueeze(-1), group_size, bits)


def _bmm_outer(group_size, fA, qB, scales, zeros, bits):
    """cuda_bmm_fA_qB_outer (a CUDA gemv) as fA @ the dequantized qB. The kernel asserts 2 or
    4 bits; this stand-in also takes 8, so that the cache's bookkeeping (which the gemv does
    not touch) can be followed on shapes that only pack at 8 bits."""
    return torch.matmul(fA, _dequantize_last_dim(qB, scales, zeros, group_size, bits).to(fA.dtype))


class _Rotary(torch.nn.Module):  # the keys fed in are taken as already rotated
    def forward(self, x, position_ids):
        return None, None


class _Feed(torch.nn.Module):
    """A projection that returns the next tensor it was given, whatever its input."""

    def __init__(self):
        super().__init__()
        self.next = None

    def forward(self, hidden):
        return self.next


def _attention_class(path: Path):
    """LlamaAttention_KIVI from models/llama_kivi.py, executed with the functions above
    in place of its Triton and CUDA imports and RoPE as the identity."""
    tree = ast.parse(path.read_text(), filename=str(path))
    cls = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "LlamaAttention_KIVI"]
    if not cls:
        raise ImportError(f"kivi_reference: {path} has no LlamaAttention_KIVI")
    from typing import List, Optional, Tuple
    import warnings

    scope = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional, "math": math, "warnings": warnings,
             "Optional": Optional, "Tuple": Tuple, "List": List, "LlamaConfig": object,
             "LlamaRotaryEmbedding": lambda config: _Rotary(),
             "apply_rotary_pos_emb": lambda q, k, cos, sin, *args, **kwargs: (q, k),
             "triton_quantize_and_pack_along_last_dim": _quantize_last_dim, "cuda_bmm_fA_qB_outer": _bmm_outer}
    exec(compile(ast.Module(cls, type_ignores=[]), str(path), "exec"), scope)
    return scope["LlamaAttention_KIVI"]


MODEL = Path(SOURCE).parent.parent / "models" / "llama_kivi.py"
ATTENTION = _attention_class(MODEL) if MODEL.is_file() else None
TORCH_DTYPES = {"float16": torch.float16, "float32": torch.float32, "float64": torch.float64}


class Cache:
    """kv.kivi.cache through LlamaAttention_KIVI.forward (the non-flash class; the flash
    class keeps the cache with the same lines): its past_key_value tuple read back after
    each call. The projections are fed the keys and values given (queries zero)."""

    def __init__(self, *, bits_k: int = 2, bits_v: int = 2, group: int = 32, residual: int = 128,
                 dtype: str = "float16"):
        if ATTENTION is None:
            raise NotImplementedError(f"no models/llama_kivi.py beside KIVI_NEW_PACK ({MODEL})")
        self.bits = (bits_k, bits_v)
        self.group, self.dtype, self.past, self.layer = group, TORCH_DTYPES[dtype], None, None
        self.options = {"k_bits": bits_k, "v_bits": bits_v, "group_size": group, "residual_length": residual}

    def _layer(self, h: int, d: int):
        from types import SimpleNamespace

        config = SimpleNamespace(attention_dropout=0.0, hidden_size=h * d, num_attention_heads=h,
                                 num_key_value_heads=h, max_position_embeddings=1 << 20, rope_theta=1e4,
                                 use_flash=True, attention_bias=False, pretraining_tp=1, **self.options)
        layer = ATTENTION(config)
        layer.q_proj, layer.k_proj, layer.v_proj, layer.o_proj = _Feed(), _Feed(), _Feed(), torch.nn.Identity()
        return layer.to(self.dtype)

    def _step(self, keys, values, tokens=None):
        k, v = np.asarray(keys), np.asarray(values)
        if k.ndim != 4 or k.shape != v.shape or (tokens is not None and k.shape[2] != tokens):
            raise ValueError(f"keys, values: expected [B, H, T, D] of one shape, got {k.shape} and {v.shape}")
        b, h, t, d = k.shape
        if self.layer is None:
            r, (bk, bv) = self.options["residual_length"], self.bits
            if r % (32 // bk) or d % (32 // bv):  # what pack_tensor asserts (the Triton packer drops the rest)
                raise NotImplementedError(f"the reference packs R = {r} keys and D = {d} channels into int32 words: "
                                          f"multiples of {32 // bk} and {32 // bv} at {bk} and {bv} bits")
            self.layer = self._layer(h, d)

        def flat(x):  # [B, H, T, D] -> [B, T, H*D], what a projection returns
            return _tensor(x).to(self.dtype).transpose(1, 2).reshape(b, t, h * d)

        self.layer.k_proj.next, self.layer.v_proj.next = flat(k), flat(v)
        self.layer.q_proj.next = torch.zeros(b, t, h * d, dtype=self.dtype)
        _, _, self.past = self.layer(torch.zeros(b, t, h * d, dtype=self.dtype), past_key_value=self.past,
                                     use_cache=True)
        return self.observe()

    def prefill(self, keys, values) -> dict:
        if self.past is not None:
            raise ValueError("keys: the cache is already prefilled")
        return self._step(keys, values)

    def decode(self, keys, values) -> dict:
        if self.past is None:
            raise ValueError("keys: decode before prefill")
        return self._step(keys, values, tokens=1)

    def observe(self) -> dict:
        kq, kf, ks, km, vq, vf, vs, vm, _ = self.past
        g, (bk, bv) = self.group, self.bits
        keys = [] if kq is None else [_dequantize_last_dim(kq, ks, km, g, bk).transpose(2, 3)]
        values = [] if vq is None else [_dequantize_last_dim(vq, vs, vm, g, bv)]
        keys += [] if kf is None else [kf]
        values += [vf]
        counts = {"quantized_keys": 0 if kq is None else keys[0].shape[2], "full_keys": 0 if kf is None else kf.shape[2],
                  "quantized_values": 0 if vq is None else values[0].shape[2], "full_values": vf.shape[2]}
        return {**counts, "keys": torch.cat(keys, 2).double().numpy().tolist(),
                "values": torch.cat(values, 2).double().numpy().tolist()}


OPS = {"kv.kivi.quantize": quantize, "kv.kivi.dequantize": dequantize, "kv.kivi.pack": pack,
       "kv.kivi.unpack": unpack, "kv.kivi.cache": Cache}
_CODEC = {"axis": ["channel", "token"], "bits": [2, 4, 8]}
VARIANTS = {"kv.kivi.quantize": {**_CODEC, "group": [32, 16, 8, 4, 2, 128]},
            "kv.kivi.dequantize": {**_CODEC, "group": [32, 16, 8, 4, 2, 128]},
            "kv.kivi.pack": _CODEC, "kv.kivi.unpack": _CODEC,
            "kv.kivi.cache": {"bits_k": [2, 4, 8], "bits_v": [2, 4, 8], "group": [32, 2, 4, 8, 16],
                              "residual": [128, 4, 8, 16, 32], "dtype": ["float16", "float32", "float64"]}}
