"""Hugging Face transformers' attention functions as `attention.attend` and
`attention.attend_varlen`: the eager path (this module's OPS, at bfloat16), gpt-oss's
eager path with learnable sinks (the attribute GPT_OSS) and `sdpa_attention_forward`
(the attribute SDPA), each also at float16 and float32 by
`implementation(path, precision)`.

transformers and torch are imported when this module is: `python -m ref conform
--impl ref.conformance.adapters.transformers_attention[:SDPA]` loads it; nothing in
`ref` imports it.

The paths are these functions of transformers:
  "eager"          models.llama.modeling_llama.eager_attention_forward, or for
                   soft-capping models.gemma2.modeling_gemma2.eager_attention_forward;
                   learnable sinks declined (they are gpt-oss's path)
  "gpt_oss_eager"  models.gpt_oss.modeling_gpt_oss.eager_attention_forward: cases with
                   learnable sinks and no soft-capping (others declined)
  "sdpa"           integrations.sdpa_attention.sdpa_attention_forward (no sinks, no
                   soft-capping)
Each gets [B, H, L, D] tensors in the activation dtype, `scaling` (1/sqrt(D) when the
catalog's scale is None, as the models set it) and the mask as transformers builds it
for eager attention: additive, 0 where visible and `finfo(dtype).min` where not.
`sdpa_attention_forward` gets a boolean mask (True = visible), as transformers passes
it to SDPA. The visible keys (causal, window, sink tokens, an explicit mask) come from
`visible_keys`, aligned bottom-right as the catalog defines them.

Neither path returns an LSE: the adapter computes it in float32 with
`torch.logsumexp` over the scores as the eager path stores them (the sink joined by
logaddexp when it counts), so only the outputs are transformers' arithmetic.

Documented divergences (spec/attention.md, "Engines"):
- eager: a row that sees no key gets finfo.min on every logit, so the softmax is
  uniform and the output the mean of V (the spec: 0). transformers never reads such
  rows (padding); the adapter passes them to transformers as they are and
  transformers_attention.xfails names the flag `EmptyRow` for attend and
  attend_varlen, which covers the vectors and random examples with such a row.
- gpt_oss_eager takes the softmax in the activation dtype (bfloat16), the row maximum
  subtracted in it: under a dominant sink (logits 30 and 100 over keys near 0) the
  outputs are off by about 5% (norm-wise; a float32 softmax stored at bfloat16: 0.3%).
  Listed in transformers_attention.xfails by the vectors' ids; random examples draw
  such sinks too, so GPT_OSS at bfloat16 is run on its vectors (float32 passes all).
- sdpa_attention_forward raises at Lq = 0 (it reshapes the empty output with -1):
  transformers_attention.xfails names the flag `EmptyInput` of attend (vectors and
  random examples). attend_varlen calls it once per sequence with queries, so a
  sequence without queries never reaches it.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch
import transformers
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward as gemma2_eager
from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward as gpt_oss_eager
from transformers.models.llama.modeling_llama import eager_attention_forward as llama_eager

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

NAME = f"transformers {transformers.__version__} eager attention (bfloat16)"
VERSION = transformers.__version__

PATHS = ("eager", "gpt_oss_eager", "sdpa")
_VARIANTS = {"sink_in_lse": ["included", "excluded"]}


def _module(hq, hkv, d, sinks, dtype):
    """The attributes transformers' attention functions read from their module."""
    return SimpleNamespace(num_key_value_groups=hq // hkv, training=False, head_dim=d, is_causal=False,
                           sinks=None if sinks is None else torch.from_numpy(np.array(sinks, np.float32)).to(dtype))


def _lse(t, see, scaling, softcap, sinks, sink_in_lse, group, dtype):
    """float32 log-sum-exp of the scores as the eager path stores them."""
    scores = (t[0] @ t[1].repeat_interleave(group, dim=1).transpose(2, 3)) * scaling
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    lse = torch.logsumexp(scores.float().masked_fill(~see, float("-inf")), dim=-1)
    if sinks is not None and sink_in_lse is SinkInLse.INCLUDED:
        sink = torch.from_numpy(np.array(sinks, np.float32)).to(dtype).float()[None, :, None]
        lse = torch.logaddexp(lse, sink.expand_as(lse))
    return lse


def attend(q, k, v, sinks=None, mask=None, scale=None, causal=False, window_left=-1, window_right=-1,
           sink_tokens=0, softcap=0.0, sink_in_lse="included", *, path: str = "eager",
           precision: str = "bfloat16"):
    """One `attention.attend` call through transformers' `path` at `precision` -> (out, lse)."""
    q, k, v = (np.asarray(x) for x in (q, k, v))
    check_qkv(q, k, v, mask, sinks=sinks, softcap=softcap)
    sink_in_lse = member(sink_in_lse, SinkInLse, "sink_in_lse")
    if path == "gpt_oss_eager" and (sinks is None or softcap):
        raise NotImplementedError("gpt-oss's eager attention: learnable sinks, no soft-capping")
    if path == "eager" and sinks is not None:
        raise NotImplementedError("learnable sinks are gpt-oss's eager path (transformers_attention:GPT_OSS)")
    if path == "sdpa" and (sinks is not None or softcap):
        raise NotImplementedError("sdpa_attention_forward has no sinks and no soft-capping")
    b, lq, hq, d = q.shape
    lk, hkv = k.shape[1], k.shape[2]
    window = dict(causal=causal, window_left=window_left, window_right=window_right, sink_tokens=sink_tokens)
    see = visible(b, hq, lq, lk, mask, window)
    dtype = TORCH_DTYPES[precision]
    t = [torch.from_numpy(np.array(x, np.float32)).to(dtype).transpose(1, 2) for x in (q, k, v)]
    scaling = d**-0.5 if scale is None else float(scale)
    module = _module(hq, hkv, d, sinks, dtype)
    see_t = torch.from_numpy(see)
    if path == "sdpa":
        out, _ = sdpa_attention_forward(module, *t, attention_mask=see_t, scaling=scaling, is_causal=False)
    else:
        additive = torch.zeros(see.shape, dtype=dtype).masked_fill(~see_t, torch.finfo(dtype).min)
        if path == "gpt_oss_eager":
            out, _ = gpt_oss_eager(module, *t, attention_mask=additive, scaling=scaling)
        elif softcap:
            out, _ = gemma2_eager(module, *t, attention_mask=additive, scaling=scaling, softcap=float(softcap))
        else:
            out, _ = llama_eager(module, *t, attention_mask=additive, scaling=scaling)
    lse = _lse(t, see_t, scaling, softcap, sinks, sink_in_lse, hq // hkv, dtype)
    return out.float().numpy().astype(NUMPY_DTYPES[precision]), lse.numpy().astype(np.float32)


def attend_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, sinks=None, *, path: str = "eager",
                  precision: str = "bfloat16", **options):
    """`attention.attend_varlen` as one call per sequence (a sequence with no queries
    has no output and is not called)."""
    q, k, v, cq, ck = check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k)
    check_qkv(q[None], k[None], v[None], None, sinks=sinks, softcap=options.get("softcap", 0.0))
    out = np.zeros((q.shape[0], q.shape[1], v.shape[2]), NUMPY_DTYPES[precision])
    lse = np.zeros((q.shape[1], q.shape[0]), np.float32)
    for s in range(cq.size - 1):
        rows, keys = slice(cq[s], cq[s + 1]), slice(ck[s], ck[s + 1])
        if cq[s + 1] == cq[s]:
            continue
        o, l = attend(q[None, rows], k[None, keys], v[None, keys], sinks, path=path, precision=precision, **options)
        out[rows], lse[:, rows] = o[0], l[0]
    return out, lse


def implementation(path: str = "eager", precision: str = "bfloat16") -> Implementation:
    """transformers' `path` ("eager" or "sdpa") at `precision` as an implementation."""
    if path not in PATHS:
        raise ValueError(f"path: expected one of {PATHS}, got {path!r}")
    check_precision(precision)
    return Implementation(
        f"transformers {transformers.__version__} {path} attention ({precision})",
        {"attention.attend": lambda **kw: attend(**kw, path=path, precision=precision),
         "attention.attend_varlen": lambda **kw: attend_varlen(**kw, path=path, precision=precision)},
        variants={"attention.attend*": _VARIANTS}, version=transformers.__version__,
        precision={"attention.attend*": precision}, source=f"{__name__}:implementation({path!r}, {precision!r})")


OPS = implementation("eager", "bfloat16").ops
VARIANTS = {"attention.attend*": _VARIANTS}
PRECISION = {"attention.attend*": "bfloat16"}
GPT_OSS = implementation("gpt_oss_eager", "bfloat16")
SDPA = implementation("sdpa", "bfloat16")
