"""The real engines' speculative-decoding samplers against the specdec ops
(spec/specdec.md, "Engines"): vLLM 0.33's rejection sampler, SGLang 0.5.23's chain
sampling and greedy tree verification (both Triton kernels, run under Triton's
interpreter), and transformers 5.24's `_speculative_sampling`. Each engine's tests
skip where it is not installed; each adapter passes with its shipped xfails, every
xfail is shown failing, and each divergence is asserted on its minimal case.

Engines import their own way (vLLM and SGLang need TRITON_INTERPRET=1 before triton
is imported, which the adapters set), so each test imports its adapter inside.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from ref.conformance.catalog import discover
from ref.conformance.report import parse_entries

ADAPTERS = Path(__file__).resolve().parent.parent / "ref" / "conformance" / "adapters"
NAMES = ("vllm_rejection", "sglang_specdec", "transformers_specdec")


def _engine(module: str) -> None:
    """Skip unless `module` is installed (without importing it: vLLM's import takes seconds)."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")


def _report(name: str, ops: list[str], examples: int = 10):
    from ref.conformance.implementation import load_implementation
    from ref.conformance.runner import run

    xfails = ADAPTERS / f"{name}.xfails"
    return run(load_implementation(f"ref.conformance.adapters.{name}"), ops=ops, examples=examples, shrink=False,
               xfails=parse_entries(xfails.read_text(), source=str(xfails)))


@pytest.mark.parametrize("name", NAMES)
def test_each_xfails_file_names_catalog_ops_with_reasons(name):
    entries = parse_entries((ADAPTERS / f"{name}.xfails").read_text(), source=name)
    assert entries and {e.op for e in entries} <= set(discover())


# ------------------------------------------------------------------ vLLM


def test_vllm_replays_every_valid_vector_and_example_with_our_random_numbers():
    pytest.importorskip("torch")
    _engine("vllm")
    report = _report("vllm_rejection", ["specdec.rejection_sample"])
    [row] = report.ops
    assert report.ok, report.details()
    assert row.examples >= 10 and not row.unsupported
    assert row.xfailed and all("InvalidInput" in f.flags for f in row.xfailed)  # vLLM checks no values


def test_vllm_zero_mass_residual_emits_token_0():
    """q(x) = 0 at the draft with p = q: vLLM rejects (draft_prob > 0 is required), the
    residual max(p - q, 0) is all zero, and its race's argmax over zeros is token 0, which
    the target gives probability 0. The exact op mirrors vLLM here; the statistical op
    (whose law draws the correction from p) does not."""
    pytest.importorskip("torch")
    _engine("vllm")
    from ref.conformance.adapters import vllm_rejection

    p = np.array([[[0, 0.5, 0.5, 0]]])
    out = vllm_rejection.rejection_sample(p, np.array([[3]]), np.array([1]), np.array([[0.5]]), np.ones((1, 4)),
                                          np.array([1]), np.array([False]), p.copy(), draft="probs")
    assert out.tolist() == [[0, -1]]


# ------------------------------------------------------------------ SGLang


def test_sglang_chain_kernel_replays_every_valid_vector_with_our_uniforms():
    pytest.importorskip("torch")
    _engine("sglang")
    report = _report("sglang_specdec", ["specdec.chain_sample", "specdec.verify_tree_greedy"])
    assert report.ok, report.details()
    chain, tree = sorted(report.ops, key=lambda r: r.op)
    assert chain.xfailed and all("InvalidInput" in f.flags for f in chain.xfailed)
    assert tree.verdict == "pass" and tree.examples >= 10  # SGLang's first-match descent


def test_sglang_rejects_at_equality_and_zero_uniform():
    """SGLang keeps a draft iff u * q(x) < p(x): u == p/q rejects, and u = 0 with p(x) = 0
    rejects (its uniforms are float32 and can be 0)."""
    pytest.importorskip("torch")
    _engine("sglang")
    from ref.conformance.adapters import sglang_specdec

    p = np.array([[[0.25, 0.125, 0.125, 0.5], [1, 0, 0, 0]]])
    for u, x in ((0.125, 1), (0.0, 1)):
        p_x = p.copy()
        p_x[0, 0, 1] = 0.125 if u else 0.0
        p_x[0, 0, 0] = 0.25 if u else 0.375
        out = sglang_specdec.chain_sample(p_x, np.array([[x]]), np.array([1]), np.array([[u]]), np.array([0.5]),
                                          np.array([False]), draft="point_mass")
        assert out[0, 0] != x


# ------------------------------------------------------------------ transformers


def test_transformers_passes_with_its_xfails():
    pytest.importorskip("torch")
    _engine("transformers")
    report = _report("transformers_specdec", ["specdec.chain_sample"], examples=10)
    assert report.ok, report.details()
    [row] = report.ops
    assert row.xfailed and row.vectors_passed >= 30


def test_transformers_accepts_at_equality_zero_draft_probability_and_zero_uniform():
    """transformers keeps x iff r <= p(x) / q(x): at equality, at q(x) = 0 (p/0 = inf) and,
    with r = 0, at p(x) = 0 (a token the target never emits)."""
    pytest.importorskip("torch")
    _engine("transformers")
    from ref.conformance.adapters import transformers_specdec as tf

    def step(p_row, q_row, x, u):
        p = np.array([[p_row, [0, 0, 1, 0]]], np.float64)
        q = np.array([[q_row]], np.float64)
        return tf.chain_sample(p, np.array([[x]]), np.array([1]), np.array([[u]]), np.array([0.5]),
                               np.array([False]), q, draft="probs")[0].tolist()

    assert step([0.25, 0.25, 0.5, 0], [0.5, 0.5, 0, 0], 1, 0.5) == [1, 2]  # u == p/q: kept, then the bonus
    assert step([0.5, 0.25, 0.25, 0], [0.5, 0, 0.5, 0], 1, 0.875) == [1, 2]  # q(x) = 0: kept
    assert step([0.5, 0, 0.5, 0], [0.5, 0.5, 0, 0], 1, 0.0) == [1, 2]  # p(x) = 0 kept at u = 0
