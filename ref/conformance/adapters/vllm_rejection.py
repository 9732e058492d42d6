"""vLLM 0.33's rejection sampler (vllm/v1/sample/rejection_sampler.py) as a candidate
(the real engine; imports nothing from ref).

  specdec.rejection_sample      vLLM's three Triton kernels, called as its
                                `rejection_sample` calls them, with our random numbers:
                                `_rejection_greedy_sample` for the greedy rows (the
                                target argmax taken over our target probabilities),
                                `_sample_recovered_tokens` with inv_q = 1 / exponentials
                                (float64: vLLM's `use_fp64_gumbel` path) and
                                `_rejection_random_sample` with our uniforms.
                                `:FP32_NOISE` scores the race in float32 (e rounded to
                                float32, then 1 / e in float32), vLLM's default
                                (`use_fp64_gumbel` off).
  specdec.rejection_sample_rng  vLLM's own `rejection_sample` end to end, with its own
                                random numbers: one seeded torch.Generator per request
                                (vLLM's per-request `generators`, from `seed`), the
                                target logits log(p) (vLLM softmaxes them in float32),
                                and the bonus tokens drawn by vLLM's `random_sample`
                                (argmax for the greedy rows) from the bonus row.

Layout: the catalog's [B, k, V] rows are flattened to vLLM's [num_tokens, V] with
cu_num_draft_tokens, so rows past num_draft[b] (NaN in the vectors) never reach vLLM;
vLLM's int32 [B, k + 1] output (-1 after the emitted tokens) comes back as int64.

vLLM's kernels are Triton only (no torch path). On a CPU machine they run under
Triton's interpreter: TRITON_INTERPRET=1 must be set before triton is imported
(importing vLLM imports it; this module sets it for a process that has not), and
vLLM disables Triton unless exactly one GPU driver reports itself active, so this
module marks the CUDA driver active when none is (before importing vLLM). Run
(spec/specdec.md, "Engines"):

  env -u PYTHONHASHSEED python -m ref conform --impl ref.conformance.adapters.vllm_rejection \\
      --xfails-file ref/conformance/adapters/vllm_rejection.xfails --ops 'specdec.*'

in a virtual environment with vLLM 0.33.0 and triton installed (spec/specdec.md gives
the commands).
"""

from __future__ import annotations

import contextlib
import functools
import os
import types

os.environ["TRITON_INTERPRET"] = "1"  # read when a @triton.jit function is decorated (triton's own at its import)
import triton  # noqa: E402
from triton.language import standard as _standard  # noqa: E402

if type(_standard.max).__name__ != "InterpretedFunction":  # triton's own @jit helpers, decorated at its import
    raise RuntimeError("vllm_rejection: triton was imported before TRITON_INTERPRET=1 was set "
                       "(importing the engine imports triton): set it in the environment")
from triton.backends import backends  # noqa: E402


def _patch_driver() -> None:
    """vLLM keeps Triton only when one non-CPU driver is active; on a CPU machine none is."""
    active = [name for name, b in backends.items()
              if name != "cpu" and b.driver is not None and b.driver.is_active()]
    if not active and "nvidia" in backends:
        backends["nvidia"].driver.is_active = staticmethod(lambda: True)


_patch_driver()

import numpy as np  # noqa: E402
import torch  # noqa: E402

import vllm  # noqa: E402
from vllm.v1.sample import rejection_sampler as rs  # noqa: E402
from vllm.triton_utils import HAS_TRITON  # noqa: E402
from vllm.v1.sample.ops.topk_topp_sampler import random_sample  # noqa: E402

if not HAS_TRITON:
    raise RuntimeError("vllm_rejection: vLLM found no usable Triton (is triton installed?)")

NAME = "vLLM rejection sampler (Triton interpreter)"
VERSION = f"vllm {vllm.__version__}, triton {triton.__version__}"
DRAFTS = ("probs", "point_mass")


def _flatten(num_draft: np.ndarray, *arrays):
    """Rows [b, j] for j < num_draft[b], in request order: vLLM's [num_tokens, ...] layout."""
    b_idx = np.repeat(np.arange(num_draft.shape[0]), num_draft)
    j_idx = np.concatenate([np.arange(n) for n in num_draft]) if num_draft.size else np.zeros(0, np.int64)
    return [None if a is None else a[b_idx, j_idx] for a in arrays]


def _check_shapes(target_probs, draft_tokens, num_draft, draft_probs, draft, rows):
    """What vLLM's wrapper asserts or needs to launch at all (it checks no values)."""
    if draft not in DRAFTS:
        raise ValueError(f"draft: expected one of {DRAFTS}, got {draft!r}")
    if (draft_probs is None) != (draft == "point_mass"):
        raise ValueError(f"draft_probs: given with draft={draft!r}" if draft_probs is not None
                         else "draft_probs: missing with draft='probs'")
    if target_probs.ndim != 3 or draft_tokens.ndim != 2 or num_draft.ndim != 1:
        raise ValueError("target_probs [B, k(+1), V], draft_tokens [B, k], num_draft [B]: wrong ranks")
    B, k = draft_tokens.shape
    if target_probs.shape[:2] != (B, k + rows) or num_draft.shape != (B,):
        raise ValueError(f"target_probs {target_probs.shape}, num_draft {num_draft.shape}: "
                         f"do not match draft_tokens {draft_tokens.shape}")
    if draft_probs is not None and draft_probs.shape != (B, k, target_probs.shape[2]):
        raise ValueError(f"draft_probs {draft_probs.shape}: expected {(B, k, target_probs.shape[2])}")
    return B, k


def _tensor(a, dtype=None):
    return torch.from_numpy(np.ascontiguousarray(a if dtype is None else a.astype(dtype)))


def rejection_sample(target_probs, draft_tokens, num_draft, uniforms, exponentials, bonus_tokens, greedy,
                     draft_probs=None, *, draft="probs", noise=np.float64):
    """specdec.rejection_sample through vLLM's kernels, our random numbers fed in
    (`noise`: the dtype of inv_q, float64 as vLLM's use_fp64_gumbel, float32 by default in vLLM)."""
    target_probs, draft_tokens, num_draft = map(np.asarray, (target_probs, draft_tokens, num_draft))
    uniforms, exponentials, bonus_tokens, greedy = map(np.asarray, (uniforms, exponentials, bonus_tokens, greedy))
    draft_probs = None if draft_probs is None else np.asarray(draft_probs)
    B, k = _check_shapes(target_probs, draft_tokens, num_draft, draft_probs, draft, rows=0)
    num_draft = num_draft.astype(np.int64)
    tp, dt, u, dp = _flatten(num_draft, target_probs, draft_tokens, uniforms, draft_probs)
    out = torch.full((B, k + 1), -1, dtype=torch.int32)  # vLLM's PLACEHOLDER_TOKEN_ID
    if B == 0:
        return out.numpy().astype(np.int64)
    cu = _tensor(np.cumsum(num_draft), np.int32)
    dt_t = _tensor(dt, np.int32)
    tp_t = _tensor(tp)
    dp_t = None if dp is None else _tensor(dp)
    bonus = _tensor(bonus_tokens.reshape(B, 1), np.int64)
    is_greedy = _tensor(greedy, np.bool_)
    if is_greedy.any():
        target_argmax = tp_t.argmax(dim=-1) if tp_t.shape[0] else torch.zeros(0, dtype=torch.int64)
        rs._rejection_greedy_sample(out, cu, dt_t, target_argmax, bonus, is_greedy, k, None, None)
    if not is_greedy.all():
        recovered = torch.empty_like(dt_t)
        if dt_t.shape[0]:  # an empty grid axis (no draft at all) cannot be launched
            inv_q = _tensor(exponentials, noise).reciprocal()  # vLLM: q.exponential_() then q.reciprocal()
            rs._sample_recovered_tokens(recovered, cu, dt_t, dp_t, tp_t, inv_q, max_spec_len=k)
        rs._rejection_random_sample(out, cu, dt_t, dp_t, tp_t, bonus, recovered, _tensor(u, np.float64),
                                    is_greedy, k, None)
    return out.numpy().astype(np.int64)


class _Metadata:
    """The fields of vLLM's SamplingMetadata that `rejection_sample` reads."""

    def __init__(self, greedy: np.ndarray, generators: dict):
        self.all_greedy = bool(greedy.all())
        self.all_random = not greedy.any()
        self.temperature = torch.from_numpy(np.where(greedy, 0.0, 1.0).astype(np.float32))
        self.generators = generators


@contextlib.contextmanager
def _narrow_recovered_tiles(vocab: int):
    """vLLM launches the recovered-token kernel with 8192-wide tiles; the interpreter pays for
    every lane, which makes the statistical op's thousands of calls take hours. For V <= 8192
    a tile of V's next power of two is the same single tile (same argmax, same tie rule), so
    the statistical path launches vLLM's kernel with it; the exact path keeps vLLM's launch."""
    dispatcher = rs._sample_recovered_tokens

    def launch(out, cu, draft_ids, draft_probs, target_probs, inv_q, *, max_spec_len):
        grid = (cu.shape[0], max_spec_len)
        rs.sample_recovered_tokens_kernel[grid](
            out, cu, draft_ids, draft_probs, target_probs, inv_q, target_probs.shape[1],
            BLOCK_SIZE=triton.next_power_of_2(target_probs.shape[1]), NO_DRAFT_PROBS=draft_probs is None,
            USE_FP64_GUMBEL=inv_q.dtype == torch.float64)

    rs._sample_recovered_tokens = launch if vocab <= 8192 else dispatcher
    try:
        yield
    finally:
        rs._sample_recovered_tokens = dispatcher


def rejection_sample_rng(target_probs, draft_tokens, num_draft, greedy, draft_probs=None, *, seed, draft="probs"):
    """specdec.rejection_sample_rng: vLLM's `rejection_sample` with its own random numbers."""
    target_probs, draft_tokens, num_draft, greedy = map(np.asarray, (target_probs, draft_tokens, num_draft, greedy))
    draft_probs = None if draft_probs is None else np.asarray(draft_probs)
    B, k = _check_shapes(target_probs, draft_tokens, num_draft, draft_probs, draft, rows=1)
    num_draft = num_draft.astype(np.int64)
    if B == 0:
        return np.full((0, k + 1), -1, np.int64)
    torch.manual_seed(seed)
    generators = {b: torch.Generator().manual_seed(seed * (1 << 20) + b) for b in range(B)}  # distinct per request
    greedy = greedy.astype(bool)
    bonus_rows = _tensor(target_probs[np.arange(B), num_draft], np.float32)
    bonus = random_sample(bonus_rows.clone(), generators).reshape(B, 1).to(torch.int64)
    bonus = torch.where(_tensor(greedy).reshape(B, 1), bonus_rows.argmax(-1, keepdim=True), bonus)
    tp, dt, dp = _flatten(num_draft, target_probs[:, :k], draft_tokens, draft_probs)
    with np.errstate(divide="ignore"):
        logits = _tensor(np.log(tp.astype(np.float32)))
    cu = _tensor(np.cumsum(num_draft), np.int32)
    with _narrow_recovered_tiles(target_probs.shape[2]):
        out = rs.rejection_sample(_tensor(dt, np.int32), [int(n) for n in num_draft], k, cu,
                                  None if dp is None else _tensor(dp, np.float32), logits, bonus,
                                  _Metadata(greedy, generators))
    return out.numpy().astype(np.int64)


OPS = {"specdec.rejection_sample": rejection_sample, "specdec.rejection_sample_rng": rejection_sample_rng}
VARIANTS = {"specdec.*": {"draft": list(DRAFTS)}}
# vLLM's default configuration: the recovered-token race scored in float32 (its noise drawn
# in float32, then reciprocal() in float32; here e rounded to float32): --impl ...:FP32_NOISE
FP32_NOISE = types.SimpleNamespace(
    NAME=f"{NAME}, float32 noise (vLLM's default)", VERSION=VERSION, VARIANTS=VARIANTS,
    OPS={"specdec.rejection_sample": functools.partial(rejection_sample, noise=np.float32)})
