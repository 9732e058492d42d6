"""The rejection-sampling bug corpus: wrong samplers written the way engines have gone
wrong, each one step changed from the default run's kernels
(ref.conformance.adapters.numpy_specdec), and correct alternatives that must pass.

REJECTION_BUGS: name -> (op, flag, kernel). `bug(name)` is the Implementation of that
one op; `CORRECT`: name -> Implementation of both ops.
"""

from __future__ import annotations

import inspect
import math
from functools import partial

import numpy as np

from corpus import patched
from ref.conformance.adapters import numpy_specdec as S
from ref.conformance.implementation import Implementation

VLLM, CHAIN = "specdec.rejection_sample", "specdec.chain_sample"


def _no_coin(p, q, u):
    """Kept iff the target likes the draft at least as much as the drafter did: no coin at p < q."""
    return q > 0 and p >= q


def _float32_vllm(p, q, u):
    return S.vllm_coin(p, q, float(np.float32(u)))


def _float32_chain(p, q, u):
    return S.chain_coin(p, q, float(np.float32(u)))


def _strict_vllm(p, q, u):
    """p / q > u: rejects at equality, where vLLM (and the contract) accepts."""
    return q > 0 and p / q > u


def _loose_chain(p, q, u):
    """u * q <= p: accepts at equality (and a zero-p token at u = 0)."""
    return q > 0 and u * q <= p


def _flipped_residual(p, q, x):
    """max(0, q - p): the residual pointed the wrong way (a point-mass drafter has q = 1 at x)."""
    if q is None:
        q = [1.0 if i == x else 0.0 for i in range(len(p))]
    return [b - a if b > a else 0.0 for a, b in zip(p, q)]


def _unnormalized_cdf(r, u):
    """The first running sum past u itself: the residual's mass never divided out."""
    run = 0.0
    for i, a in enumerate(r):
        run += a
        if run > u:
            return i
    return len(r) - 1


def _cdf_ge(r, u):
    """The first running sum at or past u * S: a zero-mass token drawn at u = 0."""
    target, run = u * sum(r), 0.0
    for i, a in enumerate(r):
        run += a
        if run >= target:
            return i
    return len(r) - 1


def _cdf_past_vocab(r, u):
    """The fallback after the scan left at V (SGLang's fallback is V - 1)."""
    target, run = u * sum(r), 0.0
    for i, a in enumerate(r):
        run += a
        if run > target:
            return i
    return len(r)


def _tiled_race(r, e, tile=8):
    """The race over a tile of 8 lanes, padded lanes scoring 0, ties to the last lane: an all-zero
    residual picks a padded lane past the vocabulary (the advisory's out-of-vocabulary id)."""
    lanes = -(-len(r) // tile) * tile
    scores = [a / b for a, b in zip(r, e)] + [0.0] * (lanes - len(r))
    best = max(scores)
    return max(i for i, s in enumerate(scores) if s == best)


def _no_bonus(kept, last, j, xs):
    return kept if j is None else kept + [last]


def _rejected_kept(kept, last, j, xs):
    """The rejected draft written before the recovered token: one token too many."""
    return kept + [last] if j is None else kept + [xs[j], last]


def _overwrites_last_kept(kept, last, j, xs):
    """The recovered token written at the rejected draft's index minus one: the last kept draft lost."""
    return kept[:-1] + [last] if j is not None and kept else kept + [last]


def _next_position_q(ni, xs, ps, qs, us, greedy, coin):
    """q read at j + 1 (the drafter's outputs shifted by one row)."""
    shifted = None if qs is None else [qs[min(j + 1, ni - 1)] for j in range(len(qs))]
    return S.verify(ni, xs, ps, shifted, us, greedy, coin)


def _greedy_sampled(ni, xs, ps, qs, us, greedy, coin):
    return S.verify(ni, xs, ps, qs, us, False, coin)


def _padding_read(ni, xs, ps, qs, us, greedy, coin):
    """-1 used as an index (Python's last element): a padded draft judged as token V - 1, and kept."""
    out = []
    for j in range(ni):
        x = xs[j]
        ok = x == S.argmax(ps[j]) if greedy else coin(ps[j][x], 1.0 if qs is None else qs[j][x], us[j])
        if not ok:
            return out, j
        out.append(x)
    return out, None


def _last_tie(ni, xs, ps, qs, us, greedy, coin):
    """Greedy argmax with ties to the last index."""
    def last_argmax(row):
        best = max(row)
        return max(i for i, a in enumerate(row) if a == best)
    out = []
    for j in range(ni):
        x = xs[j]
        ok = x == last_argmax(ps[j]) if greedy else x >= 0 and coin(ps[j][x], 1.0 if qs is None else qs[j][x], us[j])
        if not ok:
            return out, j
        out.append(x)
    return out, None


def _greedy_full(kernel, last):
    """A greedy row that matches every draft ends with last(p, xs, n, k) instead of the contract's token (vLLM's
    bonus_tokens, the chain's argmax of row n)."""
    signature = inspect.signature(kernel)

    def wrong(*args, **kwargs):
        out = kernel(*args, **kwargs)
        given = signature.bind(*args, **kwargs).arguments
        greedy = np.asarray(given["greedy"])
        p, x, k = np.asarray(given["target_probs"], np.float64), np.asarray(given["draft_tokens"]), out.shape[1] - 1
        for i, n in enumerate(int(a) for a in np.asarray(given["num_draft"])):
            if greedy[i] and n and out[i, n] != -1 and list(out[i, :n]) == list(x[i, :n]):
                token = last(p[i], list(x[i]), n, k)
                out[i, n] = out[i, n] if token is None else token
        return out
    return wrong


def _argmax_last_row(p, xs, n, k):
    """argmax of the last draft's row (the row that verified it), the greedy bonus read one row early."""
    return S.argmax(p[n - 1])


def _repeat_last_draft(p, xs, n, k):
    """With every one of k drafts matched (n = k), the last draft written again where the bonus goes."""
    return xs[n - 1] if n == k else None


def _with_tolerance(kernel, tolerance):
    """The adapter's row-sum check run at another tolerance than the spec's 1e-4."""
    return patched(kernel, S, "TOLERANCE", lambda _: tolerance)


def _vllm(**steps):
    return partial(S.rejection_sample, **steps)


def _chain(**steps):
    return partial(S.chain_sample, **steps)


REJECTION_BUGS = {
    "vllm: accept when p >= q without a coin": (VLLM, "NoCoin", _vllm(coin=_no_coin)),
    "chain: accept when p >= q without a coin": (CHAIN, "NoCoin", _chain(coin=_no_coin)),
    "vllm: residual max(0, q - p)": (VLLM, "ResidualSign", _vllm(resid=_flipped_residual)),
    "chain: residual max(0, q - p)": (CHAIN, "ResidualSign", _chain(resid=_flipped_residual)),
    "chain: residual not renormalized for the inverse CDF": (CHAIN, "ResidualNorm", _chain(recover=_unnormalized_cdf)),
    "vllm: no bonus token after full acceptance": (VLLM, "Bonus", _vllm(out=_no_bonus)),
    "chain: no bonus token after full acceptance": (CHAIN, "Bonus", _chain(out=_no_bonus)),
    "vllm: acceptance length off by one (the rejected draft kept)": (VLLM, "AcceptLength", _vllm(out=_rejected_kept)),
    "chain: acceptance length off by one (the rejected draft kept)": (CHAIN, "AcceptLength",
                                                                      _chain(out=_rejected_kept)),
    "vllm: the recovered token written over the last kept draft": (VLLM, "AcceptLength",
                                                                   _vllm(out=_overwrites_last_kept)),
    "chain: the bonus drawn from the last draft's row": (CHAIN, "Bonus", _chain(bonus_at=lambda ni, k: max(ni - 1, 0))),
    "vllm: the draft probability of the next position": (VLLM, "DraftPosition", _vllm(accept=_next_position_q)),
    "chain: the draft probability of the next position": (CHAIN, "DraftPosition", _chain(accept=_next_position_q)),
    "vllm: one noise vector reused across requests": (VLLM, "Noise", _vllm(noise=lambda i, j, b: 0)),
    "vllm: a fresh noise vector per position": (VLLM, "Noise", _vllm(noise=lambda i, j, b: (i + j) % b)),
    "vllm: uniforms in float32": (VLLM, "Float32Uniforms", _vllm(coin=_float32_vllm)),
    "chain: uniforms in float32": (CHAIN, "Float32Uniforms", _chain(coin=_float32_chain)),
    "vllm: strict p / q > u": (VLLM, "AcceptEquality", _vllm(coin=_strict_vllm)),
    "chain: u * q <= p": (CHAIN, "AcceptEquality", _chain(coin=_loose_chain)),
    "vllm: a recovered token past the vocabulary (padded lanes, last-lane ties)": (VLLM, "VocabRange",
                                                                                   _vllm(recover=_tiled_race)),
    "chain: the inverse CDF's fallback at V": (CHAIN, "VocabRange", _chain(recover=_cdf_past_vocab)),
    "chain: the inverse CDF's first C >= u * S": (CHAIN, "CdfBoundary", _chain(recover=_cdf_ge)),
    "vllm: every request verified to k (rows past num_draft read)": (VLLM, "RowsPastDraft",
                                                                     _vllm(drafts=lambda ni, k: k)),
    "chain: the bonus from row k (rows past num_draft read)": (CHAIN, "RowsPastDraft",
                                                               _chain(bonus_at=lambda ni, k: k)),
    "vllm: greedy rows through the random path": (VLLM, "GreedyPath", _vllm(accept=_greedy_sampled)),
    "chain: greedy rows through the random path": (CHAIN, "GreedyPath", _chain(accept=_greedy_sampled)),
    "vllm: a padded -1 draft read as token V - 1": (VLLM, "PaddedDraft", _vllm(accept=_padding_read)),
    "chain: a padded -1 draft read as token V - 1": (CHAIN, "PaddedDraft", _chain(accept=_padding_read)),
    "vllm: greedy ties to the last index": (VLLM, "Ties", _vllm(accept=_last_tie)),
    "vllm: a greedy full match emits argmax of the last draft row, not the bonus": (
        VLLM, "Bonus", _greedy_full(S.rejection_sample, _argmax_last_row)),
    "vllm: a greedy full match of k drafts repeats the last draft": (
        VLLM, "Bonus", _greedy_full(S.rejection_sample, _repeat_last_draft)),
    "chain: a greedy full match emits argmax of the last draft row, not of row n": (
        CHAIN, "Bonus", _greedy_full(S.chain_sample, _argmax_last_row)),
    "vllm: rows checked to 1e-7 (float32 softmax rows refused)": (VLLM, "RowSumTolerance",
                                                                   _with_tolerance(S.rejection_sample, 1e-7)),
    "chain: rows checked to 1e-7 (float32 softmax rows refused)": (CHAIN, "RowSumTolerance",
                                                                    _with_tolerance(S.chain_sample, 1e-7)),
    "vllm: rows checked to 1e-3 (rows off by more accepted)": (VLLM, "RowSumTolerance",
                                                               _with_tolerance(S.rejection_sample, 1e-3)),
    "chain: rows checked to 1e-3 (rows off by more accepted)": (CHAIN, "RowSumTolerance",
                                                                _with_tolerance(S.chain_sample, 1e-3)),
}


def bug(name: str) -> Implementation:
    op, _, kernel = REJECTION_BUGS[name]
    return Implementation(name, {op: kernel}, variants={op: S.VARIANTS[op]})


# ------------------------------------------------------------------ correct alternatives


def _f32(p, q, u):
    """vLLM's arithmetic: the ratio of float32 probabilities rounded to float32, against a float64 u."""
    return q > 0 and float(np.float32(np.float32(p) / np.float32(q))) >= u


def _f32_chain(p, q, u):
    """The chain coin on float32-rounded probabilities."""
    return q > 0 and u * float(np.float32(q)) < float(np.float32(p))


def _race_reciprocal(r, e):
    """vLLM's arithmetic: r * (1 / e) in float32."""
    scores = np.float32(r) * (np.float32(1) / np.float32(e))
    return int(np.argmax(scores))


def _cdf_normalized(r, u):
    """Normalize first, then compare running sums with u (the paper's form)."""
    total = math.fsum(r)
    run = 0.0
    for i, a in enumerate(r):
        run += a / total if total else 0.0
        if run > u:
            return i
    return len(r) - 1


def _recovered_first(ni, xs, ps, qs, us, greedy, coin):
    """Every draft's verdict computed first (a vector of coins), then the first rejection found."""
    verdicts = [(xs[j] == S.argmax(ps[j])) if greedy else
                (xs[j] >= 0 and coin(ps[j][xs[j]], 1.0 if qs is None else qs[j][xs[j]], us[j])) for j in range(ni)]
    j = next((i for i, ok in enumerate(verdicts) if not ok), None)
    return xs[:ni if j is None else j], j


CORRECT = {
    "float32 probabilities and scores (vLLM's arithmetic)": Implementation(
        "float32 specdec", {VLLM: _vllm(coin=_f32, recover=_race_reciprocal),
                            CHAIN: _chain(coin=_f32_chain, recover=_cdf_normalized)}, variants=dict(S.VARIANTS)),
    "verdicts first, then the first rejection": Implementation(
        "verdicts-first specdec", {VLLM: _vllm(accept=_recovered_first), CHAIN: _chain(accept=_recovered_first)},
        variants=dict(S.VARIANTS)),
}
