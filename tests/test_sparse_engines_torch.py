"""Block-sparse attention against a real engine: torch's flex_attention with a BlockMask
on CPU (the torch_flex adapter, spec/sparse.md "Engines"). Skips without torch; CI's
peers stage runs it.

The adapter passes the conformance run with its one named divergence; the eager path's
two behaviours the adapter works around are asserted on their minimal cases: it decides
by mask_mod alone (a BlockMask's kv_indices are a sparsity hint it ignores), and it
multiplies unselected values by 0.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
flex = pytest.importorskip("torch.nn.attention.flex_attention")

from ref.conformance import runner  # noqa: E402
from ref.conformance.adapters import torch_flex  # noqa: E402
from ref.conformance.catalog import discover  # noqa: E402
from ref.conformance.report import parse_entries  # noqa: E402
from ref.sparse import block  # noqa: E402

XFAILS = Path(torch_flex.__file__).with_suffix(".xfails")


def _values(rng, shape):
    return (rng.integers(-16, 17, shape) / 8).astype(np.float32)


def test_xfails_file_names_catalog_ops_with_reasons():
    entries = parse_entries(XFAILS.read_text(), source="torch_flex")
    assert entries and {e.op for e in entries} <= set(discover())
    assert all(len(e.reason.split()) >= 8 for e in entries)


def test_flex_passes_the_vectors_and_examples_with_its_named_divergence():
    entries = parse_entries(XFAILS.read_text(), source="torch_flex")
    report = runner.run(torch_flex.IMPLEMENTATION, ops=["sparse.block.attend", "sparse.block.attend_csr"],
                        examples=5, shrink=False, xfails=entries)
    assert {row.op: row.verdict for row in report.ops} == {"sparse.block.attend": "xfail",
                                                           "sparse.block.attend_csr": "xfail"}
    for row in report.ops:  # only the vectors the xfails name fail
        assert not row.failures and {f.flags for f in row.xfailed} == {("BlockUnread", "NaN")}, row.op


def test_eager_flex_ignores_kv_indices():
    """A BlockMask naming block 1 of 2 with an all-true mask_mod: eager flex attends both
    blocks (full attention), so the adapter's mask_mod carries the selection."""
    rng = np.random.default_rng(0)
    q, k, v = _values(rng, (1, 4, 1, 8)), _values(rng, (1, 8, 1, 8)), _values(rng, (1, 8, 1, 8))
    mask = flex.BlockMask.from_kv_blocks(torch.tensor([[[1]]], dtype=torch.int32),
                                         torch.tensor([[[[1, 0]]]], dtype=torch.int32), BLOCK_SIZE=(4, 4),
                                         mask_mod=lambda b, h, qi, ki: ki >= 0, seq_lengths=(4, 8))
    t = [torch.from_numpy(x).transpose(1, 2) for x in (q, k, v)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = flex.flex_attention(*t, block_mask=mask).transpose(1, 2).numpy()
    dense, _ = block.attend(q, k, v, np.array([[[[0, 1]]]], np.int32), block_size_q=4, block_size_k=4)
    selected, _ = block.attend(q, k, v, np.array([[[[1]]]], np.int32), block_size_q=4, block_size_k=4)
    assert np.allclose(out, dense, atol=1e-6) and not np.allclose(out, selected, atol=1e-3)
    got, _ = torch_flex.attend(q, k, v, np.array([[[[1]]]], np.int32), block_size_q=4, block_size_k=4)
    assert np.allclose(got, selected, atol=1e-6)


def test_eager_flex_multiplies_unselected_values_by_zero():
    """The named divergence, minimal: a NaN value in block 0, which no row reads, turns
    the output NaN; the oracle's output is finite."""
    rng = np.random.default_rng(1)
    q, k, v = _values(rng, (1, 1, 1, 8)), _values(rng, (1, 8, 1, 8)), _values(rng, (1, 8, 1, 8))
    v[0, 0, 0, 0] = np.nan
    idx = np.array([[[[1]]]], np.int32)
    want, _ = block.attend(q, k, v, idx, block_size_k=4)
    got, _ = torch_flex.attend(q, k, v, idx, block_size_k=4)
    assert np.isfinite(want).all() and np.isnan(got[..., 0]).all() and np.isfinite(got[..., 1:]).all()
