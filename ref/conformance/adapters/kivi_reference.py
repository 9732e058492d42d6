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

The reference packs as it quantizes, so it asserts that the packed axis holds a
multiple of 32 / b codes: a tensor that is not is declined (NotImplementedError).

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


OPS = {"kv.kivi.quantize": quantize, "kv.kivi.dequantize": dequantize, "kv.kivi.pack": pack,
       "kv.kivi.unpack": unpack}
_CODEC = {"axis": ["channel", "token"], "bits": [2, 4, 8]}
VARIANTS = {"kv.kivi.quantize": {**_CODEC, "group": [32, 16, 8, 4, 2, 128]},
            "kv.kivi.dequantize": {**_CODEC, "group": [32, 16, 8, 4, 2, 128]},
            "kv.kivi.pack": _CODEC, "kv.kivi.unpack": _CODEC}
