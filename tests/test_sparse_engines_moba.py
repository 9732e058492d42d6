"""MoBA's reference code (moba/moba_naive.py of MoonshotAI/MoBA, read at 61e456b) against
the sparse.moba oracles: the conformance run with its xfails, and each named difference
on a minimal case (spec/sparse.md, "Engines", "MoBA's reference"). MoBA is a repository,
not a package: set MOBA_NAIVE to a checkout's moba/moba_naive.py; skipped otherwise."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not os.environ.get("MOBA_NAIVE"):
    pytest.skip("MOBA_NAIVE (the path of MoBA's moba/moba_naive.py) is not set", allow_module_level=True)

from ref.conformance.adapters import moba_reference as R  # noqa: E402
from ref.conformance.implementation import load_implementation  # noqa: E402
from ref.conformance.report import parse_entries  # noqa: E402
from ref.conformance.runner import run  # noqa: E402
from ref.sparse import moba  # noqa: E402
from ref.sparse.catalog.moba import moba_inputs  # noqa: E402

XFAILS = Path(R.__file__).with_suffix(".xfails")


def test_reference_conforms_up_to_its_xfails():
    entries = parse_entries(XFAILS.read_text(), source=str(XFAILS))
    report = run(load_implementation("ref.conformance.adapters.moba_reference"), ops=["sparse.moba.*"],
                 examples=10, xfails=entries)
    assert {r.op: r.verdict for r in report.ops if r.verdict != "not covered"} == {
        "sparse.moba.attend": "xfail", "sparse.moba.attend_varlen": "xfail"}


def test_reference_agrees_on_selection_causality_and_gqa():
    x = moba_inputs(np.random.default_rng(7), 2, 24, 24, 4, 2, 8, chunk_size=4, top_k=3)
    out, lse = R.attend(**x)
    o, l = moba.attend(**x)
    assert np.allclose(out, o, atol=1e-5) and np.allclose(lse, l, atol=1e-5)


def test_reference_breaks_a_tie_toward_the_higher_chunk():
    """4 chunks of 1 token, chunks 0 and 1 equal, one past slot for the last query:
    torch.topk (CPU) keeps chunk 1, the spec chunk 0."""
    k = np.array([1, 1, -1, 0], np.float32).reshape(1, 4, 1, 1)
    q = np.ones((1, 4, 1, 1), np.float32)
    v = np.arange(4, dtype=np.float32).reshape(1, 4, 1, 1)
    out, _ = R.attend(q, k, v, np.int64(1), np.int64(2))
    want, _ = moba.attend(q, k, v, chunk_size=1, top_k=2)
    mask = moba.chunk_mask(q, k, chunk_size=1, top_k=2)[0, 0, 3]
    assert mask.tolist() == [True, False, False, True]
    assert not np.isclose(out[0, 3, 0, 0], want[0, 3, 0, 0])


def test_reference_spreads_a_nan_value_to_rows_that_cannot_see_it():
    x = moba_inputs(np.random.default_rng(8), 1, 6, 6, 1, 1, 4, chunk_size=2, top_k=2)
    x["v"][0, 5, 0, 0] = np.nan
    out, _ = R.attend(**x)
    want, _ = moba.attend(**x)
    assert np.isfinite(want[0, :5]).all() and np.isnan(out[0, :5, 0, 0]).all()
