"""SGLang 0.5.23's speculative verification kernels as candidates (the real engine;
imports nothing from ref).

  specdec.chain_sample  `chain_speculative_sampling_triton`
                        (sglang/kernels/ops/speculative/reject_sampling.py) for the
                        random rows: one request at a time (the kernel takes one draft
                        length for the whole batch, the catalog one per request) as a
                        chain: candidates [1, n + 1] = (the verified token, the n drafts),
                        retrieve_index = 0..n, retrieve_next_token = 1..n then -1, no
                        siblings; our uniforms [1, n], final uniform [1], target rows
                        0..n and draft rows 0..n - 1 (a point-mass draft as a one-hot
                        row: SGLang's kernel takes draft rows only). The greedy rows
                        go through `verify_tree_greedy_triton` (spec_tree.py) on the same
                        chain with target_predict = the argmax of each target row: that
                        is how SGLang verifies greedy requests. The emitted tokens are
                        predicts[accept_index[0..accept_token_num]], padded with -1.
  specdec.verify_tree_greedy  `verify_tree_greedy_triton` on the whole batch: candidates =
                        draft_tokens, target_predict = target_tokens, retrieve_index =
                        b * N + i, next_token / next_sibling built from the parent array
                        (first child and next sibling by index, as SGLang builds them);
                        variant path = "first_match" (SGLang descends by the first
                        matching child); nodes = accept_index - b * N.

Both kernels are Triton only; they run under Triton's interpreter: TRITON_INTERPRET=1
must be set when a kernel's file is loaded (this module sets it and loads them); no
driver patch is needed. The kernels are loaded from
their files (sglang.kernels.ops.speculative imports GPU-only modules on the way).
`threshold_single` and `threshold_acc` are passed as 1.0 (exact sampling): this
Triton kernel ignores both. Draft -1 inside num_draft (vLLM's padding) has no SGLang
meaning (it pads by tree shape): such cases are declined with NotImplementedError.

Run (spec/specdec.md, "Engines"):

  TRITON_INTERPRET=1 PYTHONPATH=$PWD:<SGLang install> python -m ref conform \\
      --impl ref.conformance.adapters.sglang_specdec \\
      --xfails-file ref/conformance/adapters/sglang_specdec.xfails --ops 'specdec.*'
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # read when a @triton.jit function is decorated (triton's own at its import)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
from triton.language import standard as _standard  # noqa: E402

if type(_standard.max).__name__ != "InterpretedFunction":  # triton's own @jit helpers, decorated at its import
    raise RuntimeError("sglang_specdec: triton was imported before TRITON_INTERPRET=1 was set "
                       "(importing the engine imports triton): set it in the environment")

_SPEC = importlib.util.find_spec("sglang")
if _SPEC is None or not _SPEC.submodule_search_locations:
    raise ImportError("sglang_specdec: SGLang is not installed")
_DIR = Path(next(iter(_SPEC.submodule_search_locations))) / "kernels" / "ops" / "speculative"


def _load(stem: str):
    """One kernel file as a module, without its package's GPU-only imports."""
    spec = importlib.util.spec_from_file_location(f"_sglang_specdec_{stem}", _DIR / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_reject = _load("reject_sampling")
chain_speculative_sampling_triton = _reject.chain_speculative_sampling_triton
try:
    from sglang.kernels.ops.speculative.spec_tree import verify_tree_greedy_triton
except ImportError:  # its module imports platform helpers; the kernel itself needs only triton
    verify_tree_greedy_triton = None


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("sglang")
    except Exception:  # an unpacked install without metadata
        return "unknown"


NAME = "SGLang speculative kernels (Triton interpreter)"
VERSION = f"sglang {_version()}, triton {triton.__version__}"
DRAFTS = ("probs", "point_mass")


def _chain(n: int):
    """SGLang's tree arrays for one request whose n drafts form a chain."""
    index = torch.arange(n + 1, dtype=torch.int64).reshape(1, n + 1)
    next_token = torch.tensor([list(range(1, n + 1)) + [-1]], dtype=torch.int64)
    next_sibling = torch.full((1, n + 1), -1, dtype=torch.int64)
    return index, next_token, next_sibling


def _emitted(predicts, accept_index, accept_num, k: int) -> np.ndarray:
    row = np.full(k + 1, -1, np.int64)
    m = int(accept_num[0])
    row[:m + 1] = predicts[accept_index[0, :m + 1]].numpy()
    return row


def _random_row(tp, dt, u, u_final, dp, n: int, k: int) -> np.ndarray:
    predicts = torch.full((n + 1,), -1, dtype=torch.int32)
    accept_index = torch.full((1, n + 1), -1, dtype=torch.int32)
    accept_num = torch.zeros(1, dtype=torch.int32)
    candidates = torch.from_numpy(np.concatenate([[0], dt[:n]]).astype(np.int64)).reshape(1, n + 1)
    index, next_token, next_sibling = _chain(n)
    chain_speculative_sampling_triton(
        predicts, accept_index, accept_num, candidates, index, next_token, next_sibling,
        torch.from_numpy(np.ascontiguousarray(u[:n])).reshape(1, n),
        torch.tensor([u_final], dtype=torch.from_numpy(np.asarray(u_final)).dtype),
        torch.from_numpy(np.ascontiguousarray(tp[:n + 1]))[None],
        torch.from_numpy(np.ascontiguousarray(dp[:n]))[None],
        1.0, 1.0, True)
    return _emitted(predicts, accept_index, accept_num, k)


def _greedy_row(tp, dt, n: int, k: int) -> np.ndarray:
    if verify_tree_greedy_triton is None:
        raise NotImplementedError("SGLang's spec_tree module did not import")
    predicts = torch.full((n + 1,), -1, dtype=torch.int32)
    accept_index = torch.full((1, n + 1), -1, dtype=torch.int32)
    accept_num = torch.zeros(1, dtype=torch.int32)
    candidates = torch.from_numpy(np.concatenate([[0], dt[:n]]).astype(np.int64)).reshape(1, n + 1)
    index, next_token, next_sibling = _chain(n)
    target_predict = torch.from_numpy(np.ascontiguousarray(tp[:n + 1])).argmax(-1).reshape(1, n + 1)
    verify_tree_greedy_triton(predicts, accept_index, accept_num, candidates, index, next_token, next_sibling,
                              target_predict)
    return _emitted(predicts, accept_index, accept_num, k)


def chain_sample(target_probs, draft_tokens, num_draft, uniforms, final_uniforms, greedy, draft_probs=None, *,
                 draft="probs"):
    """specdec.chain_sample through SGLang's kernels, one request at a time."""
    target_probs, draft_tokens, num_draft = map(np.ascontiguousarray, (target_probs, draft_tokens, num_draft))
    uniforms, final_uniforms, greedy = map(np.ascontiguousarray, (uniforms, final_uniforms, greedy))
    if draft not in DRAFTS or (draft_probs is None) != (draft == "point_mass"):
        raise ValueError(f"draft_probs: does not fit draft={draft!r}")
    if target_probs.ndim != 3 or draft_tokens.ndim != 2:
        raise ValueError("target_probs [B, k + 1, V], draft_tokens [B, k]: wrong ranks")
    B, k = draft_tokens.shape
    V = target_probs.shape[2]
    if target_probs.shape[:2] != (B, k + 1) or num_draft.shape != (B,) or uniforms.shape != (B, k):
        raise ValueError("target_probs, num_draft, uniforms: shapes do not match draft_tokens")
    if draft_probs is None:  # a point-mass drafter: q = 1 at the drafted token (SGLang takes draft rows only)
        draft_probs = np.zeros((B, k, V), target_probs.dtype)
        b_idx, j_idx = np.nonzero(draft_tokens >= 0)
        draft_probs[b_idx, j_idx, draft_tokens[b_idx, j_idx]] = 1
    draft_probs = np.ascontiguousarray(draft_probs)
    out = np.full((B, k + 1), -1, np.int64)
    for b in range(B):
        n = int(num_draft[b])
        if (draft_tokens[b, :n] < 0).any():
            raise NotImplementedError("a -1 draft inside num_draft: SGLang has no padded drafts")
        if greedy[b]:
            out[b] = _greedy_row(target_probs[b], draft_tokens[b], n, k)
        else:
            out[b] = _random_row(target_probs[b], draft_tokens[b], uniforms[b], final_uniforms[b], draft_probs[b],
                                 n, k)
    return out


def _links(parents: np.ndarray):
    """SGLang's retrieve_next_token (first child by index) and retrieve_next_sibling."""
    b, n = parents.shape
    first = np.full((b, n), -1, np.int64)
    sibling = np.full((b, n), -1, np.int64)
    for r in range(b):
        last_child = {}
        for i in range(1, n):
            parent = int(parents[r, i])
            if parent in last_child:
                sibling[r, last_child[parent]] = i
            else:
                first[r, parent] = i
            last_child[parent] = i
    return first, sibling


def verify_tree_greedy(parents, draft_tokens, target_tokens, *, path="first_match"):
    """specdec.verify_tree_greedy through `verify_tree_greedy_triton`, the whole batch at once."""
    if verify_tree_greedy_triton is None:
        raise NotImplementedError("SGLang's spec_tree module did not import")
    if path != "first_match":
        raise ValueError(f"path: SGLang descends by the first matching child, not {path!r}")
    parents, draft_tokens, target_tokens = map(np.ascontiguousarray, (parents, draft_tokens, target_tokens))
    if parents.ndim != 2 or draft_tokens.shape != parents.shape or target_tokens.shape != parents.shape:
        raise ValueError("parents, draft_tokens, target_tokens: expected one shape [B, N]")
    if parents.dtype.kind not in "iu":  # the links are built here from the parents; tokens go to SGLang as they are
        raise TypeError(f"parents: expected integers, got {parents.dtype}")
    b, n = parents.shape
    if b and n and ((parents[:, 0] != -1).any() or any((parents[:, i] < 0).any() or (parents[:, i] >= i).any()
                                                       for i in range(1, n))):
        raise ValueError("parents: node 0 is the root (-1) and node i's parent lies in [0, i)")
    first, sibling = _links(parents.astype(np.int64))
    predicts = torch.full((b * n,), -1, dtype=torch.int32)
    accept_index = torch.full((b, n), -1, dtype=torch.int32)
    accept_num = torch.zeros(b, dtype=torch.int32)
    if b and n:
        verify_tree_greedy_triton(predicts, accept_index, accept_num, torch.from_numpy(draft_tokens),
                                  torch.arange(b * n, dtype=torch.int64).reshape(b, n), torch.from_numpy(first),
                                  torch.from_numpy(sibling), torch.from_numpy(target_tokens))
    tokens = np.full((b, n), -1, np.int64)
    nodes = np.full((b, n), -1, np.int64)
    for r in range(b):
        m = int(accept_num[r])
        flat = accept_index[r, :m + 1].numpy().astype(np.int64)
        nodes[r, :m + 1] = flat - r * n
        tokens[r, :m + 1] = predicts[flat].numpy()
    return tokens, nodes, accept_num.numpy().astype(np.int64)


OPS = {"specdec.chain_sample": chain_sample, "specdec.verify_tree_greedy": verify_tree_greedy}
VARIANTS = {"specdec.chain_sample": {"draft": list(DRAFTS)}, "specdec.verify_tree_greedy": {"path": ["first_match"]}}
