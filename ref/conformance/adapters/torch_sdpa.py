"""PyTorch's `torch.nn.functional.scaled_dot_product_attention` on CPU as `attention.attend`
and `attention.attend_varlen`, at bfloat16 (this module's OPS), float16 or float32
(`implementation(precision)`, or the attributes FLOAT16 and FLOAT32 for `--impl
ref.conformance.adapters.torch_sdpa:FLOAT16`).

torch is imported when this module is: `python -m ref conform --impl
ref.conformance.adapters.torch_sdpa` loads it; nothing in `ref` imports it.

How the catalog's call maps onto SDPA:
- the visible-key mask (causal, window, sink tokens, an explicit mask) is built with
  `visible_keys` and passed as a boolean `attn_mask`: SDPA's own `is_causal` aligns
  top-left, the catalog bottom-right (spec/attention.md, "Engines");
- GQA by `enable_gqa=True` (query head h reads KV head h // (Hq / Hkv), as the spec's);
- SDPA returns no LSE: the adapter computes it in float32 with `torch.logsumexp` over
  the same stored q and k, so only the output is SDPA's own arithmetic;
- SDPA has no learnable sinks and no soft-capping: such cases raise
  NotImplementedError (counted as skipped);
- a row that sees no key: SDPA's own answer (0 on CPU since torch 2.5), not patched;
  empty operands (Lq = 0, Lk = 0) go to SDPA as they are (torch 2.13 returns an empty
  output, or 0 for Lk = 0).
"""

from __future__ import annotations

import numpy as np
import torch

from ref.arguments import member
from ref.attention.attend import SinkInLse
from ref.conformance.adapters._torch_attention import (
    NUMPY_DTYPES,
    TORCH_DTYPES,
    check_precision,
    check_qkv,
    check_varlen,
    visible,
)
from ref.conformance.implementation import Implementation

NAME = f"torch {torch.__version__} scaled_dot_product_attention (CPU, bfloat16)"
VERSION = torch.__version__

_VARIANTS = {"sink_in_lse": ["included", "excluded"]}  # no sinks: both read alike


def sdpa(q, k, v, sinks=None, mask=None, scale=None, causal=False, window_left=-1, window_right=-1,
         sink_tokens=0, softcap=0.0, sink_in_lse="included", *, precision: str = "bfloat16"):
    """One `attention.attend` call through SDPA at `precision` -> (out, lse)."""
    member(sink_in_lse, SinkInLse, "sink_in_lse")  # no sinks: both values read alike
    if sinks is not None:
        raise NotImplementedError("SDPA has no learnable sinks")
    if softcap:
        raise NotImplementedError("SDPA has no soft-capping")
    q, k, v = (np.asarray(x) for x in (q, k, v))
    check_qkv(q, k, v, mask)
    b, lq, hq, d = q.shape
    lk, hkv = k.shape[1], k.shape[2]
    window = dict(causal=causal, window_left=window_left, window_right=window_right, sink_tokens=sink_tokens)
    see = torch.from_numpy(visible(b, hq, lq, lk, mask, window))
    t = [torch.from_numpy(np.array(x, np.float32)).to(TORCH_DTYPES[precision]).transpose(1, 2) for x in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*t, attn_mask=see, scale=scale, enable_gqa=True)
    scores = t[0].float() @ t[1].float().repeat_interleave(hq // hkv, dim=1).transpose(2, 3)
    scores = scores * (d**-0.5 if scale is None else scale)
    lse = torch.logsumexp(scores.masked_fill(~see, float("-inf")), dim=-1)
    return out.transpose(1, 2).float().numpy().astype(NUMPY_DTYPES[precision]), lse.numpy().astype(np.float32)


def sdpa_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, sinks=None, *, precision: str = "bfloat16", **options):
    """`attention.attend_varlen` as one SDPA call per sequence."""
    q, k, v, cq, ck = check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k)
    out = np.zeros((q.shape[0], q.shape[1], v.shape[2]), NUMPY_DTYPES[precision])
    lse = np.zeros((q.shape[1], q.shape[0]), np.float32)
    for s in range(cq.size - 1):
        rows, keys = slice(cq[s], cq[s + 1]), slice(ck[s], ck[s + 1])
        o, l = sdpa(q[None, rows], k[None, keys], v[None, keys], sinks, precision=precision, **options)
        out[rows], lse[:, rows] = o[0], l[0]
    if cq.size == 1:  # no sequences: still the argument checks
        sdpa(q[None], k[None], v[None], sinks, precision=precision, **options)
    return out, lse


def implementation(precision: str) -> Implementation:
    """SDPA at `precision` ("bfloat16", "float16" or "float32") as an implementation."""
    check_precision(precision)
    return Implementation(
        f"torch {torch.__version__} scaled_dot_product_attention (CPU, {precision})",
        {"attention.attend": lambda **kw: sdpa(**kw, precision=precision),
         "attention.attend_varlen": lambda **kw: sdpa_varlen(**kw, precision=precision)},
        variants={"attention.attend*": _VARIANTS}, version=torch.__version__,
        precision={"attention.attend*": precision}, source=f"{__name__}:implementation({precision!r})")


OPS = implementation("bfloat16").ops
VARIANTS = {"attention.attend*": _VARIANTS}
PRECISION = {"attention.attend*": "bfloat16"}
FLOAT16 = implementation("float16")
FLOAT32 = implementation("float32")
