"""transformers 5.24's assisted-generation speculative sampling
(`transformers.generation.utils._speculative_sampling`, Leviathan et al. algorithm 1)
as a candidate (the real engine; imports nothing from ref).

The function takes one request (batch 1) with logits for the draft's n positions and
the target's n + 1, softmaxes them, accepts draft i when r_i <= p_i / q_i with
r = torch.rand_like(...), and draws the next token with torch.multinomial from
norm(max(p - q, 0)) at the first rejection or from the target's row n when all are
accepted. The catalog's probabilities are handed in as the "logits" in a tensor whose
softmax returns them unchanged, so the numbers compared are transformers' own
arithmetic on exactly our p and q (the model's softmax is not under test). Requests
are looped over, each with its own draft length num_draft[b].

  specdec.chain_sample          our random numbers fed through the function's two
                                draws: `torch.rand_like` returns uniforms[b, :n] and
                                `torch.multinomial` is replaced by the inverse CDF of
                                its (normalized) weights at final_uniforms[b] (after
                                torch.multinomial's own checks of those weights). The
                                module's `torch` is swapped for the call only.
  specdec.rejection_sample_rng  torch's global RNG seeded with `seed`, the requests
                                in order: transformers' own draws end to end.

Greedy rows are not this function's: transformers verifies greedy assisted
generation inline in `_assisted_decoding` (argmax matching), so they are declined
with NotImplementedError, as are -1 drafts (transformers has no padded drafts). A
point-mass draft is a one-hot row (prompt-lookup drafting has no draft logits).

Run (spec/specdec.md, "Engines"):
  python -m ref conform --impl ref.conformance.adapters.transformers_specdec \\
      --xfails-file ref/conformance/adapters/transformers_specdec.xfails --ops 'specdec.*'
"""

from __future__ import annotations

import numpy as np
import torch
import transformers
from transformers.generation import utils as _generation

NAME = "transformers _speculative_sampling"
VERSION = f"transformers {transformers.__version__}, torch {torch.__version__}"
DRAFTS = ("probs", "point_mass")
_speculative_sampling = _generation._speculative_sampling


class _Probs(torch.Tensor):
    """Probabilities standing in for logits: softmax gives them back as they are."""

    def softmax(self, dim=None, dtype=None):  # noqa: ARG002 (the rows are normalized already)
        return self.as_subclass(torch.Tensor).clone()


def _as_logits(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a)).as_subclass(_Probs)


class _FedTorch:
    """torch, with the two draws of `_speculative_sampling` answered from given numbers."""

    def __init__(self, uniforms: np.ndarray, final_uniform: float):
        self.uniforms, self.final_uniform = uniforms, final_uniform

    def __getattr__(self, name):
        return getattr(torch, name)

    def rand_like(self, like, **_):
        if like.shape != self.uniforms.shape:
            raise RuntimeError(f"rand_like for {tuple(like.shape)}, fed {self.uniforms.shape}")
        return torch.from_numpy(self.uniforms.astype(np.float64)).to(like.dtype)

    def multinomial(self, weights, num_samples, **_):
        torch.multinomial(weights, num_samples)  # torch's refusals (NaN, negative, all-zero weights) first
        w = weights.to(torch.float64)
        cumulative = torch.cumsum(w, dim=-1)
        above = (cumulative > self.final_uniform * cumulative[..., -1:]) & (w > 0)
        return above.to(torch.int8).argmax(dim=-1, keepdim=True)


def _arrays(target_probs, draft_tokens, num_draft, greedy, draft_probs, draft):
    target_probs, draft_tokens, num_draft, greedy = map(np.ascontiguousarray,
                                                        (target_probs, draft_tokens, num_draft, greedy))
    if draft not in DRAFTS or (draft_probs is None) != (draft == "point_mass"):
        raise ValueError(f"draft_probs: does not fit draft={draft!r}")
    if target_probs.ndim != 3 or draft_tokens.ndim != 2 or num_draft.ndim != 1:
        raise ValueError("target_probs [B, k + 1, V], draft_tokens [B, k], num_draft [B]: wrong ranks")
    B, k = draft_tokens.shape
    V = target_probs.shape[2]
    if target_probs.shape[:2] != (B, k + 1) or num_draft.shape != (B,) or greedy.shape != (B,):
        raise ValueError("target_probs, num_draft, greedy: shapes do not match draft_tokens")
    if draft_probs is None:
        draft_probs = np.zeros((B, k, V), target_probs.dtype)
        b_idx, j_idx = np.nonzero(draft_tokens >= 0)
        draft_probs[b_idx, j_idx, draft_tokens[b_idx, j_idx]] = 1
    draft_probs = np.ascontiguousarray(draft_probs)
    if draft_probs.shape != (B, k, V):
        raise ValueError(f"draft_probs {draft_probs.shape}: expected {(B, k, V)}")
    for b in range(B):
        if greedy[b]:
            raise NotImplementedError("greedy rows: transformers verifies them inside _assisted_decoding")
        if (draft_tokens[b, :num_draft[b]] < 0).any():
            raise NotImplementedError("a -1 draft inside num_draft: transformers has no padded drafts")
    return target_probs, draft_tokens, num_draft.astype(np.int64), draft_probs


def _one(tp, dt, dp, n: int, k: int) -> np.ndarray:
    """One request through _speculative_sampling: [k + 1] tokens, -1 after the emitted ones."""
    ids = torch.from_numpy(dt[:n].astype(np.int64)).reshape(1, n)
    tokens, _ = _speculative_sampling(ids, _as_logits(dp[None, :n]), n, _as_logits(tp[None, :n + 1]))
    row = np.full(k + 1, -1, np.int64)
    emitted = tokens.reshape(-1).numpy()
    row[:emitted.size] = emitted
    return row


def chain_sample(target_probs, draft_tokens, num_draft, uniforms, final_uniforms, greedy, draft_probs=None, *,
                 draft="probs"):
    """specdec.chain_sample with our uniforms fed through transformers' two draws."""
    tp, dt, nd, dp = _arrays(target_probs, draft_tokens, num_draft, greedy, draft_probs, draft)
    uniforms, final_uniforms = np.asarray(uniforms), np.asarray(final_uniforms)
    B, k = dt.shape
    out = np.full((B, k + 1), -1, np.int64)
    for b in range(B):
        n = int(nd[b])
        _generation.torch = _FedTorch(uniforms[b, :n], float(final_uniforms[b]))
        try:
            out[b] = _one(tp[b], dt[b], dp[b], n, k)
        finally:
            _generation.torch = torch
    return out


def rejection_sample_rng(target_probs, draft_tokens, num_draft, greedy, draft_probs=None, *, seed, draft="probs"):
    """specdec.rejection_sample_rng with transformers' own draws from torch's global RNG."""
    tp, dt, nd, dp = _arrays(target_probs, draft_tokens, num_draft, greedy, draft_probs, draft)
    B, k = dt.shape
    torch.manual_seed(seed)
    out = np.full((B, k + 1), -1, np.int64)
    for b in range(B):
        out[b] = _one(tp[b], dt[b], dp[b], int(nd[b]), k)
    return out


OPS = {"specdec.chain_sample": chain_sample, "specdec.rejection_sample_rng": rejection_sample_rng}
VARIANTS = {"specdec.*": {"draft": list(DRAFTS)}}
