"""PyTorch's scaled_dot_product_attention (CPU) as an attention kernel at bfloat16,
float16 or float32: the bottom-right mask built with `visible_keys` and passed
explicitly (SDPA's `is_causal` aligns top-left), GQA by `enable_gqa`. SDPA returns
no LSE, so the adapter computes it in float32 with `torch.logsumexp`; it has no
learnable sinks and no soft-capping (declined with NotImplementedError). Imported
only where torch is installed."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from ref.attention.attend import visible_keys
from ref.conformance.implementation import Implementation

_TORCH = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
_NUMPY = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}


def sdpa(q, k, v, sinks=None, mask=None, scale=None, causal=False, window_left=-1, window_right=-1,
         sink_tokens=0, softcap=0.0, sink_in_lse="included", *, precision="bfloat16"):
    if sinks is not None or softcap:
        raise NotImplementedError("SDPA has no learnable sinks and no soft-capping")
    q, k, v = (np.asarray(x) for x in (q, k, v))
    if q.dtype.kind != "f" or q.ndim != 4 or k.shape[-1] != q.shape[-1] or q.shape[2] % k.shape[2]:
        raise ValueError("q, k, v: expected float [B, L, H, D] with KV heads dividing query heads")
    if mask is not None and np.asarray(mask).dtype != np.bool_:
        raise TypeError("mask: expected bool")
    b, lq, hq, d = q.shape
    lk, dv = k.shape[1], v.shape[3]
    see = visible_keys(lq, lk, causal=causal, window_left=window_left, window_right=window_right,
                       sink_tokens=sink_tokens)[None, None]
    if mask is not None:
        m = np.asarray(mask)
        see = see & (m[None, None] if m.ndim == 2 else m)
    see = torch.from_numpy(np.array(np.broadcast_to(see, (b, hq, lq, lk))))
    t = [torch.from_numpy(np.array(x, np.float32)).to(_TORCH[precision]).transpose(1, 2)
         for x in (q, k, v)]
    if lq and lk:  # a row that sees no key: SDPA's own answer (0 since torch 2.5), not patched here
        o = torch.nn.functional.scaled_dot_product_attention(*t, attn_mask=see, scale=scale, enable_gqa=True)
        o = o.transpose(1, 2).float().numpy()
        scores = t[0].float() @ t[1].float().repeat_interleave(hq // k.shape[2], dim=1).transpose(2, 3)
        scores = scores * (d**-0.5 if scale is None else scale)
        lse = torch.logsumexp(scores.masked_fill(~see, float("-inf")), dim=-1).numpy()
    else:
        o, lse = np.zeros((b, lq, hq, dv), np.float32), np.full((b, hq, lq), -np.inf, np.float32)
    return o.astype(_NUMPY[precision]), lse.astype(np.float32)


def sdpa_impl(precision: str) -> Implementation:
    return Implementation(f"torch {torch.__version__} SDPA {precision}",
                          {"attention.attend": lambda **kw: sdpa(**kw, precision=precision)},
                          variants={"attention.attend": {"sink_in_lse": ["included", "excluded"]}})
