"""The real engines' speculative-decoding samplers against the specdec ops
(spec/specdec.md, "Engines"): vLLM 0.33's rejection sampler, SGLang 0.5.23's chain
sampling and greedy tree verification (both Triton kernels, run under Triton's
interpreter), and transformers 5.24's `_speculative_sampling`. Each engine's tests
skip where it is not installed; each adapter passes with its shipped xfails, what
fails is only the divergences they name, and each divergence is asserted on its
minimal case.

vLLM and SGLang run in a child process: Triton's interpreter must be switched on
(TRITON_INTERPRET=1) before triton is first imported, which this process may already
have done (importing either engine imports it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ref.conformance.catalog import discover
from ref.conformance.report import parse_entries

ROOT = Path(__file__).resolve().parent.parent
ADAPTERS = ROOT / "ref" / "conformance" / "adapters"
NAMES = ("vllm_rejection", "sglang_specdec", "transformers_specdec")


def _child(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """`python args...` from the repository root with the interpreter on and PYTHONHASHSEED unset."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)


def _conform(name: str, ops: str, tmp_path: Path, examples: int = 10) -> list[dict]:
    """The adapter through `python -m ref conform` with its xfails: the report's op rows."""
    report = tmp_path / f"{name}.json"
    done = _child(["-m", "ref", "conform", "--impl", f"ref.conformance.adapters.{name}", "--ops", ops,
                   "--xfails-file", str(ADAPTERS / f"{name}.xfails"), "--examples", str(examples), "--no-shrink",
                   "--report", str(report)], tmp_path)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return [row for row in json.loads(report.read_text())["ops"] if row["verdict"] != "not covered"]


@pytest.mark.parametrize("name", NAMES)
def test_each_xfails_file_names_catalog_ops_with_reasons(name):
    entries = parse_entries((ADAPTERS / f"{name}.xfails").read_text(), source=name)
    assert entries and {e.op for e in entries} <= set(discover())


# ------------------------------------------------------------------ vLLM


def test_vllm_replays_every_valid_vector_and_example_with_our_random_numbers(tmp_path):
    pytest.importorskip("vllm")
    [row] = _conform("vllm_rejection", "specdec.rejection_sample", tmp_path)
    assert row["verdict"] == "xfail" and row["examples"] >= 10 and not row["unsupported"]
    assert row["xfailed"] and all("InvalidInput" in f["flags"] for f in row["xfailed"])  # vLLM checks no values


def test_vllm_zero_mass_residual_emits_token_0(tmp_path):
    """q(x) = 0 at the draft with p = q: vLLM rejects (draft_prob > 0 is required), the
    residual max(p - q, 0) is all zero, and its race's argmax over zeros is token 0, which
    the target gives probability 0. The exact op mirrors vLLM here; the statistical op
    (whose law draws the correction from p) does not."""
    pytest.importorskip("vllm")
    script = ("import numpy as np; from ref.conformance.adapters import vllm_rejection as v; "
              "p = np.array([[[0, 0.5, 0.5, 0]]]); "
              "print(v.rejection_sample(p, np.array([[3]]), np.array([1]), np.array([[0.5]]), np.ones((1, 4)), "
              "np.array([1]), np.array([False]), p.copy(), draft='probs').tolist())")
    done = _child(["-c", script], tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip().splitlines()[-1] == "[[0, -1]]"


# ------------------------------------------------------------------ SGLang


def test_sglang_replays_every_valid_vector_with_our_uniforms(tmp_path):
    pytest.importorskip("sglang")
    chain, tree = sorted(_conform("sglang_specdec", "specdec.chain_sample,specdec.verify_tree_greedy", tmp_path),
                         key=lambda row: row["op"])
    assert chain["verdict"] == "xfail" and chain["examples"] >= 10
    assert chain["xfailed"] and all("InvalidInput" in f["flags"] for f in chain["xfailed"])
    assert tree["verdict"] == "xfail" and tree["examples"] >= 10  # SGLang's first-match descent
    assert tree["xfailed"] and all("InvalidInput" in f["flags"] for f in tree["xfailed"])  # token dtypes unchecked


def test_sglang_rejects_at_equality_and_at_a_zero_uniform(tmp_path):
    """SGLang keeps a draft iff u * q(x) < p(x): u == p(x) rejects a point-mass draft, and
    so does u = 0 with p(x) = 0 (its coins are float32 and can be 0)."""
    pytest.importorskip("sglang")
    script = ("import numpy as np; from ref.conformance.adapters import sglang_specdec as s; "
              "rows = ([0.25, 0.125, 0.125, 0.5], [0.375, 0, 0.125, 0.5]); "
              "print([s.chain_sample(np.array([[r, [1, 0, 0, 0]]]), np.array([[1]]), np.array([1]), "
              "np.array([[u]]), np.array([0.5]), np.array([False]), draft='point_mass')[0, 0].item() "
              "for r, u in zip(rows, (0.125, 0.0))])")
    done = _child(["-c", script], tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert 1 not in json.loads(done.stdout.strip().splitlines()[-1])  # neither draft kept


# ------------------------------------------------------------------ transformers


def test_transformers_passes_with_its_xfails():
    pytest.importorskip("transformers")
    from ref.conformance.implementation import load_implementation
    from ref.conformance.runner import run

    xfails = ADAPTERS / "transformers_specdec.xfails"
    report = run(load_implementation("ref.conformance.adapters.transformers_specdec"), ops=["specdec.chain_sample"],
                 examples=10, shrink=False, xfails=parse_entries(xfails.read_text(), source=str(xfails)))
    assert report.ok, report.details()
    [row] = report.ops
    assert row.verdict == "xfail" and row.vectors_passed >= 30


def test_transformers_accepts_at_equality_zero_draft_probability_and_zero_uniform():
    """transformers keeps x iff r <= p(x) / q(x): at equality, at q(x) = 0 (p/0 = inf) and,
    with r = 0, at p(x) = 0 (a token the target never emits)."""
    pytest.importorskip("transformers")
    from ref.conformance.adapters import transformers_specdec as tf

    def step(p_row, q_row, x, u):
        p = np.array([[p_row, [0, 0, 1, 0]]], np.float64)
        q = np.array([[q_row]], np.float64)
        return tf.chain_sample(p, np.array([[x]]), np.array([1]), np.array([[u]]), np.array([0.5]),
                               np.array([False]), q, draft="probs")[0].tolist()

    assert step([0.25, 0.25, 0.5, 0], [0.5, 0.5, 0, 0], 1, 0.5) == [1, 2]  # u == p/q: kept, then the bonus
    assert step([0.5, 0.25, 0.25, 0], [0.5, 0, 0.5, 0], 1, 0.875) == [1, 2]  # q(x) = 0: kept
    assert step([0.5, 0, 0.5, 0], [0.5, 0.5, 0, 0], 1, 0.0) == [1, 2]  # p(x) = 0 kept at u = 0
