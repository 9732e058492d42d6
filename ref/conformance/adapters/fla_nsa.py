"""flash-linear-attention 0.6.0's NSA references (fla/ops/nsa/naive.py, the pure-torch
path) as an implementation of sparse.nsa.* on CPU.

  sparse.nsa.selected_attend  naive_nsa_selection(q, k, v, block_indices, block_size, scale);
                              block_counts as naive_nsa's quota does it (the slots past a
                              query's count set to -1: naive_nsa_selection has no counts);
                              its output only, so the LSE beside it is computed here in
                              torch over the same tokens (logsumexp of the scaled logits);
                              fla computes in float32 whatever the input dtype: a float64
                              result comes back as the float32 values it holds
  sparse.nsa.attend           variant fla: naive_nsa's steps (mean_pooling of k and v,
                              naive_nsa_compression, naive_nsa_topk, naive_nsa_selection,
                              o = g_slc o_slc + g_cmp o_cmp), called one by one because
                              naive_nsa asserts a GQA group of >= 16 query heads (a Triton
                              tile size, not part of the definition)

Declined (NotImplementedError): Tq != Tk (naive_nsa_selection asserts TQ == TK), the
paper variant (fla has one block size and no position terms) and window > 0 (naive_nsa
calls flash_attn's CUDA kernel for the sliding window).

mean_pooling is a Triton kernel: it runs on CPU only under Triton's interpreter, so the
adapter needs TRITON_INTERPRET=1 in the environment before anything imports fla (it is set
here when fla is not yet imported) and keeps only the first config of each autotuner.

Run (spec/sparse.md, "Engines"):
  TRITON_INTERPRET=1 python -m ref conform --impl ref.conformance.adapters.fla_nsa \\
      --xfails-file ref/conformance/adapters/fla_nsa.xfails --ops 'sparse.nsa.*'
"""

from __future__ import annotations

import os
import sys
import warnings

import numpy as np

if "fla" not in sys.modules:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton.runtime.autotuner as _autotuner  # noqa: E402

from ref.conformance.adapters import as_native  # noqa: E402

_INIT = _autotuner.Autotuner.__init__


def _first_config(self, fn, arg_names, configs, *args, **kwargs):
    """Autotuners benchmark every config; under the interpreter one is enough (and fast)."""
    return _INIT(self, fn, arg_names, configs[:1], *args, **kwargs)


_autotuner.Autotuner.__init__ = _first_config
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import fla  # noqa: E402
    from fla.ops.nsa.naive import naive_nsa_compression, naive_nsa_selection, naive_nsa_topk  # noqa: E402
    from fla.ops.utils.pooling import mean_pooling  # noqa: E402

NAME = "flash-linear-attention NSA (naive torch references, CPU)"
VERSION = f"fla {fla.__version__}, torch {torch.__version__}"
_DTYPES = {np.dtype(np.float16): torch.float16, np.dtype(np.float32): torch.float32,
           np.dtype(np.float64): torch.float64}


def _tensor(x) -> torch.Tensor:
    a = as_native(x)
    if a.dtype.kind in "iu":
        return torch.from_numpy(a.astype(np.int64))
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(a)


def _numpy(t: torch.Tensor) -> np.ndarray:
    """fla's output as NumPy: bfloat16 through float32; float64 as the float32 values it was
    computed as (q.float(), then cast up exactly), so that the judge reads its precision."""
    return t.float().numpy() if t.dtype in (torch.bfloat16, torch.float64) else t.numpy()


def _quota(block_indices, block_counts):
    """naive_nsa_topk's quota: a slot past the query's count holds -1."""
    idx = np.asarray(block_indices)
    if block_counts is None or idx.dtype.kind not in "iu":
        return idx
    return np.where(np.arange(idx.shape[-1]) < np.asarray(block_counts)[..., None], idx, -1)


def _lse(q, k, block_indices, block_size, scale):
    """log sum_j exp(scale q . k_j) over the tokens naive_nsa_selection reads (-inf: none)."""
    b, t, hq, _ = q.shape
    hkv = k.shape[2]
    idx = block_indices.repeat_interleave(hq // hkv, dim=2)  # [B, T, Hq, S]
    tok = (idx[..., None] * block_size + torch.arange(block_size)).flatten(-2)  # [B, T, Hq, S * bs]
    pos = torch.arange(t).view(1, t, 1, 1)
    seen = (idx[..., None] >= 0).expand(*idx.shape, block_size).flatten(-2) & (tok <= pos) & (tok >= 0)
    kk = k.float().repeat_interleave(hq // hkv, dim=2)  # [B, T, Hq, D]
    gathered = kk[torch.arange(b).view(b, 1, 1, 1), tok.clamp(0, t - 1), torch.arange(hq).view(1, 1, hq, 1)]
    s = torch.einsum("bthd,bthnd->bthn", q.float() * scale, gathered).masked_fill(~seen, float("-inf"))
    return torch.logsumexp(s, dim=-1).transpose(1, 2).numpy()  # [B, Hq, T]


def selected_attend(q, k, v, block_indices, block_counts=None, *, block_size=64, scale=None):
    tq, tk = np.shape(q)[1], np.shape(k)[1]
    if tq != tk:
        raise NotImplementedError("naive_nsa_selection: TQ != TK is not supported")
    qt, kt, vt = _tensor(q), _tensor(k), _tensor(v)
    it = _tensor(_quota(block_indices, block_counts))
    scale_ = np.shape(q)[-1] ** -0.5 if scale is None else scale
    out = naive_nsa_selection(qt, kt, vt, it, block_size=block_size, scale=scale)
    return _numpy(out), _lse(qt, kt, it, block_size, scale_)


def attend(q, k, v, g_cmp, g_slc, g_swa, pe_k=None, pe_v=None, *, variant="paper", block=None, stride=None,
           block_sel=None, n=None, window=None, scale=None):
    bs = 64 if block is None else block
    if variant != "fla" or pe_k is not None or pe_v is not None:
        raise NotImplementedError("fla has one block size and no position terms: the paper variant is declined")
    if not bs == (bs if stride is None else stride) == (bs if block_sel is None else block_sel):
        raise NotImplementedError("fla: one block size")
    if window:
        raise NotImplementedError("naive_nsa's sliding window is flash_attn's CUDA kernel")
    if np.shape(q)[1] != np.shape(k)[1]:
        raise NotImplementedError("naive_nsa_selection: TQ != TK is not supported")
    qt, kt, vt = _tensor(q), _tensor(k), _tensor(v)
    scale = np.shape(q)[-1] ** -0.5 if scale is None else scale
    k_cmp, v_cmp = mean_pooling(kt, bs, None), mean_pooling(vt, bs, None)
    o_cmp, _ = naive_nsa_compression(q=qt, k_cmp=k_cmp, v_cmp=v_cmp, block_size=bs, scale=scale)
    idx = naive_nsa_topk(q=qt, k_cmp=k_cmp, block_counts=16 if n is None else int(n), block_size=bs, scale=scale)
    o_slc = naive_nsa_selection(qt, kt, vt, idx, bs, scale)
    o = torch.addcmul(o_slc * _tensor(g_slc).unsqueeze(-1), o_cmp, _tensor(g_cmp).unsqueeze(-1))
    return _numpy(o)


OPS = {"sparse.nsa.selected_attend": selected_attend, "sparse.nsa.attend": attend}
VARIANTS = {"sparse.nsa.attend": {"variant": ("fla",)}}
