"""MoBA's reference code (MoonshotAI/MoBA, moba/moba_naive.py; read at 61e456b) as an
implementation of sparse.moba.attend and sparse.moba.attend_varlen, on CPU.

`moba_attn_varlen_naive(q, k, v, cu_seqlens, max_seqlen, moba_chunk_size, moba_topk)`
is packed self-attention (q, k, v [S, H, D], one cu_seqlens) and returns the output
only. The file imports torch and math alone, so it is loaded as it is
(importlib.util.spec_from_file_location). MoBA is a repository, not a package: set
MOBA_NAIVE to the path of a checkout's moba/moba_naive.py. CI cannot fetch
repositories; the findings of the runs in a session are in spec/sparse.md ("Engines",
"MoBA's reference").

  sparse.moba.attend_varlen  the function itself; GQA by repeat_interleave of the KV
                             heads (its wrapper's `moba_layer` does the same)
  sparse.moba.attend         q [B, L, Hq, D] packed as B sequences of L tokens; Lq != Lk
                             declined (the reference is prefill only: its wrapper runs
                             plain flash attention for decode), and so is Dv != D (its
                             output buffer is zeros_like(q))

lse: the reference returns none, so the module's `torch` is a proxy that passes every
call through and keeps the tensor its score einsum ("xhd,yhd->hxy") returns; the
reference then adds its gate mask and scales that tensor in place, so after the call it
holds the exact masked logits the reference took the softmax of, and the adapter's lse
is torch.logsumexp of them. Inputs are cast to float32 (the reference computes in
float32 and casts the output back to q's dtype).

Run (spec/sparse.md, "Engines"):
  MOBA_NAIVE=path/to/MoBA/moba/moba_naive.py python -m ref conform \
      --impl ref.conformance.adapters.moba_reference \
      --xfails-file ref/conformance/adapters/moba_reference.xfails --ops 'sparse.moba.*'
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import torch

from ref.conformance.adapters import as_native

SOURCE = os.environ.get("MOBA_NAIVE", "")
SCORES = "xhd,yhd->hxy"  # the reference's q k^T einsum, whose tensor it masks and scales in place


class _Recorder:
    """`torch` for the reference module: every attribute passed through, the score
    einsum's results kept."""

    def __init__(self):
        self.logits: list[torch.Tensor] = []

    def __getattr__(self, name):
        return getattr(torch, name)

    def einsum(self, equation, *operands):
        out = torch.einsum(equation, *operands)
        if equation == SCORES:
            self.logits.append(out)
        return out


def load(path: str):
    """The module at `path` with its `torch` replaced by a _Recorder."""
    if not path or not Path(path).is_file():
        raise ImportError(f"moba_reference: set MOBA_NAIVE to the path of MoBA's moba/moba_naive.py (got {path!r})")
    spec = importlib.util.spec_from_file_location("moba_naive_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "moba_attn_varlen_naive"):
        raise ImportError(f"moba_reference: {path} has no moba_attn_varlen_naive")
    module.torch = _Recorder()
    return module


REF = load(SOURCE)
NAME = "MoBA reference moba_attn_varlen_naive (torch, CPU)"
VERSION = f"MoonshotAI/MoBA moba/moba_naive.py from {SOURCE}, torch {torch.__version__}"


def _tensor(x, ndim: int, name: str) -> torch.Tensor:
    a = np.asarray(x)
    if a.dtype.kind != "f" or a.ndim != ndim:
        raise ValueError(f"{name}: expected a float array of {ndim} dimensions, got {a.dtype} {a.shape}")
    return torch.from_numpy(as_native(a.astype(np.float32)))


def _int(x, name: str) -> int:
    a = np.asarray(x)
    if a.ndim or a.dtype.kind not in "iu":
        raise ValueError(f"{name}: expected an integer, got {x!r}")
    return int(a)


def attend_varlen(q, k, v, cu_seqlens, chunk_size, top_k):
    qt, kt, vt = _tensor(q, 3, "q"), _tensor(k, 3, "k"), _tensor(v, 3, "v")
    cu = np.asarray(cu_seqlens)
    if cu.dtype.kind not in "iu" or cu.ndim != 1:
        raise ValueError(f"cu_seqlens: expected 1-D integer offsets, got {cu.dtype} {cu.shape}")
    if vt.shape[2] != qt.shape[2]:
        raise NotImplementedError("the reference's output buffer is zeros_like(q): Dv must equal D")
    hq, hkv = qt.shape[1], kt.shape[1]
    if hkv == 0 or hq % hkv:
        raise ValueError(f"k: {hkv} KV heads do not divide {hq} query heads")
    kt, vt = kt.repeat_interleave(hq // hkv, dim=1), vt.repeat_interleave(hq // hkv, dim=1)
    recorder = REF.torch
    recorder.logits.clear()
    cut = torch.from_numpy(as_native(cu.astype(np.int64)))
    lens = np.diff(cu) if cu.size > 1 else np.zeros(0, np.int64)
    out = REF.moba_attn_varlen_naive(qt, kt, vt, cut, int(lens.max(initial=0)), _int(chunk_size, "chunk_size"),
                                     _int(top_k, "top_k"))
    lse = [torch.logsumexp(x, dim=-1) for x in recorder.logits]  # [H, S_i] per sequence, in order
    recorder.logits.clear()
    lse = torch.cat(lse, dim=1) if lse else torch.zeros(hq, 0)
    return out.numpy(), lse.numpy()


def attend(q, k, v, chunk_size, top_k):
    qa, ka, va = np.asarray(q), np.asarray(k), np.asarray(v)
    if qa.ndim != 4 or ka.ndim != 4 or va.ndim != 4:
        raise ValueError(f"q, k, v: expected [B, L, H, D], got {qa.shape}, {ka.shape}, {va.shape}")
    b, lq, hq, d = qa.shape
    if ka.shape[1] != lq:
        raise NotImplementedError("the reference is prefill only (Lq = Lk); its wrapper decodes with flash attention")
    if ka.shape[0] != b or va.shape[:3] != ka.shape[:3] or ka.shape[3] != d:
        raise ValueError(f"k {ka.shape} and v {va.shape} do not match q {qa.shape}")
    cu = (np.arange(b + 1) * lq).astype(np.int32)
    out, lse = attend_varlen(qa.reshape(b * lq, hq, d), ka.reshape(b * lq, *ka.shape[2:]),
                             va.reshape(b * lq, *va.shape[2:]), cu, chunk_size, top_k)
    return out.reshape(b, lq, hq, -1), lse.reshape(hq, b, lq).transpose(1, 0, 2).copy()


P = "sparse.moba."
OPS = {P + "attend": attend, P + "attend_varlen": attend_varlen}
VARIANTS: dict = {}
