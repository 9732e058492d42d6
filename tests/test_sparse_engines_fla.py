"""flash-linear-attention 0.6.0's NSA references (fla/ops/nsa/naive.py) against sparse.nsa:
the agreements and each difference its xfails file names (spec/sparse.md, "Engines").
Needs fla, einops, triton and torch; TRITON_INTERPRET=1 is set by the adapter when fla is
not yet imported (mean_pooling is a Triton kernel)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")  # before fla (and its Triton kernels) is imported
pytest.importorskip("torch")
pytest.importorskip("fla")

from ref.conformance.adapters import fla_nsa as F  # noqa: E402
from ref.sparse import nsa  # noqa: E402
from ref.sparse.catalog.nsa import forward_inputs, selected_inputs  # noqa: E402


def test_selection_agrees_with_the_oracle():
    x = selected_inputs(np.random.default_rng(0), 1, 14, 4, 2, 3, 4)
    out, lse = F.selected_attend(**x, block_size=4)
    want_out, want_lse = nsa.selected_attend(**x, block_size=4)
    np.testing.assert_allclose(out, want_out, atol=2e-6)
    np.testing.assert_allclose(lse, want_lse, atol=2e-6)


def test_a_query_without_tokens_is_nan_not_zero():
    x = selected_inputs(np.random.default_rng(1), 1, 6, 2, 1, 2, 4)
    x["block_indices"][0, 0] = -1
    out, _ = F.selected_attend(**x, block_size=4)
    assert np.isnan(out[0, 0]).all() and not nsa.selected_attend(**x, block_size=4)[0][0, 0].any()


def test_a_block_named_twice_is_read_twice():
    x = selected_inputs(np.random.default_rng(2), 1, 8, 2, 1, 3, 4)
    x["block_indices"][0, :, 0] = [0, 0, 1]
    once = {**x, "block_indices": np.where(np.arange(3) == 1, -1, x["block_indices"])}
    with pytest.raises(ValueError):
        nsa.selected_attend(**x, block_size=4)
    assert not np.allclose(F.selected_attend(**x, block_size=4)[0][0, 4:], nsa.selected_attend(**once,
                                                                                               block_size=4)[0][0, 4:])


def test_fla_forward_agrees_with_the_fla_variant():
    x = forward_inputs(np.random.default_rng(3), 1, 24, 2, 1)
    params = {"variant": "fla", "block": 4, "stride": 4, "block_sel": 4, "n": 4, "window": 0}
    np.testing.assert_allclose(F.attend(**x, **params), nsa.attend(**x, **params), atol=2e-6)
