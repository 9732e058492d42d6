"""Read traffic per decode step (ref.sparse.traffic, spec/sparse.md#traffic): the NSA
paper's figures, the spec's table, counts checked against explicit sets of positions,
the reductions to dense attention, and the roofline area's counts."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ref.conformance.implementation import Implementation
from ref.conformance.runner import run
from ref.roofline.kv import kv_attention_bytes
from ref.roofline.stacking import NSA, nsa_read_tokens
from ref.sparse import traffic as T

ROOT = Path(__file__).resolve().parents[1]
GQA = dict(kv_heads=8, head_dim=128, v_head_dim=128, element_bits=16)
ONE = dict(kv_heads=1, head_dim=1, v_head_dim=0, element_bits=8)  # one byte per entry
PAPER = dict(cmp_block=32, cmp_stride=16, sel_block=64, selected=16, local=2, window=512)


def test_nsa_reproduces_the_papers_table_4():
    """NSA's decoding table (arXiv 2502.11089, Table 4): tokens loaded per step and the
    expected speed-up at 8k..64k. The table counts L / d compressed tokens; the oracle
    the floor((L - l) / d) + 1 complete blocks, one fewer at l = 2d."""
    table = {8192: (2048, "4.0"), 16384: (2560, "6.4"), 32768: (3584, "9.1"), 65536: (5632, "11.6")}
    for context, (loaded, speedup) in table.items():
        assert context // 16 + 16 * 64 + 512 == loaded  # the table's own count
        assert T.nsa_tokens(context) == loaded - 1
        assert int(T.nsa_bytes(context, **PAPER, **ONE)) == loaded - 1
        assert f"{context / T.nsa_tokens(context):.1f}" == speedup == f"{context / loaded:.1f}"


def test_the_spec_prints_the_oracles_table():
    page = (ROOT / "spec" / "sparse.md").read_text()
    assert T.render(T.table()) in page


def _blocks(tokens: int, size: int) -> list[range]:
    return [range(s, min(s + size, tokens)) for s in range(0, tokens, size)]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 200), st.integers(1, 40), st.integers(1, 12), st.data())
def test_block_tokens_are_the_selected_sets_size(tokens, size, n, data):
    """Any n blocks holding the query's own (the last) read the oracle's token count."""
    blocks = _blocks(tokens, size)
    order = data.draw(st.permutations(range(len(blocks) - 1)))  # the other blocks, all full
    picked = min(n, len(blocks))
    chosen = set().union(*(set(blocks[i]) for i in [*order[:picked - 1], len(blocks) - 1]))
    expected = 8 * (len(chosen) * 3 + (picked + 2) * 4)  # kv_heads 8, D + Dv 3 bytes, 4-byte indices, csr
    assert int(T.block_bytes(tokens, size, n, 8, 1, 2, 8, 32, layout="csr")) == expected
    unselected = set().union(*(set(blocks[i]) for i in order[:n]))  # full blocks only, the query's left out
    assert int(T.block_bytes(tokens, size, n, 1, 1, 0, 8, 0, last="unselected")) == len(unselected)


def _nsa_union_max(t: int, l_sel: int, n: int, local: int, w: int) -> int:
    """The most original tokens a union kernel reads: the window and the forced local
    blocks, plus the best choice of the other n - local blocks (every choice tried)."""
    blocks = _blocks(t, l_sel)
    b = min(n, len(blocks))
    forced = list(range(len(blocks) - min(local, b), len(blocks)))
    window = set(range(t - min(w, t), t))
    base = window.union(*(set(blocks[i]) for i in forced))
    free = [i for i in range(len(blocks)) if i not in forced]
    return max(len(base.union(*(set(blocks[i]) for i in pick))) for pick in combinations(free, b - len(forced)))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 64), st.integers(4, 16), st.integers(1, 6), st.integers(1, 3), st.integers(0, 60))
def test_nsa_union_is_the_largest_union_of_window_and_selection(tokens, sel_block, selected, local, window):
    local = min(local, selected)
    expected = _nsa_union_max(tokens, sel_block, selected, local, window)
    got = T.nsa_tokens(tokens, cmp_block=tokens + 1, cmp_stride=1, sel_block=sel_block, selected=selected,
                       local=local, window=window, overlap="union")
    assert got == expected
    blocks = _blocks(tokens, sel_block)
    chosen = sum(len(r) for r in blocks[-min(selected, len(blocks)):])  # any n blocks with the last: same count
    assert T.nsa_tokens(tokens, cmp_block=tokens + 1, cmp_stride=1, sel_block=sel_block, selected=selected,
                        local=local, window=window) == chosen + min(window, tokens)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 200), st.integers(1, 40), st.integers(1, 8))
def test_moba_counts_the_chunks_and_the_gate(tokens, chunk, top_k):
    chunks = _blocks(tokens, chunk)
    attended = sum(len(c) for c in chunks[-min(top_k, len(chunks)):])  # the current chunk and k - 1 others
    past = sum(1 for c in chunks[:-1] if len(c) == chunk)
    assert int(T.moba_bytes(tokens, chunk, top_k, 1, 2, 3, 8)) == attended * 5 + tokens * 2
    assert int(T.moba_bytes(tokens, chunk, top_k, 1, 2, 3, 8, gating="cached")) == attended * 5 + past * 2


@pytest.mark.parametrize("tokens", [1, 63, 64, 65, 1000, 131072])
def test_every_method_reduces_to_dense_when_it_reads_everything(tokens):
    dense = int(T.dense_bytes(tokens, **GQA))
    assert dense == int(kv_attention_bytes(tokens, 1, 8, 128, 128, 16))
    assert int(T.block_bytes(tokens, 64, 1 << 20, index_bits=0, **GQA)) == dense
    everything = dict(cmp_block=tokens + 1, cmp_stride=1, sel_block=64, selected=1 << 20, local=1, window=0)
    assert int(T.nsa_bytes(tokens, **everything, **GQA)) == dense
    assert int(T.nsa_bytes(tokens, **{**everything, "window": tokens}, **GQA, overlap="union")) == dense
    chunks = -(-tokens // 4096)
    assert int(T.moba_bytes(tokens, 4096, 1 << 20, **GQA, gating="cached")) == dense + (chunks - 1) * 8 * 128 * 2
    mla = int(T.dense_bytes(tokens, 1, 576, 0, 16))
    assert int(T.dsa_bytes(tokens, 1 << 20, 512, 64, 16, 128, 0, 128, 0)) == mla


@pytest.mark.parametrize("tokens", [1, 31, 32, 600, 2000, 4096, 4100, 10**6])
def test_nsa_against_the_roofline_stacking_count(tokens):
    """ref.roofline.stacking.nsa_read_tokens counts n l' selected tokens whatever the
    query's block holds: it equals this op's reread count where the last selection
    block is full or every block is read, and is larger by l' minus the partial block's
    tokens otherwise (this op counts the partial block as it is)."""
    compressed, original = nsa_read_tokens(tokens, NSA())
    mine = T.nsa_tokens(tokens)
    tail = tokens % 64
    if tail == 0 or tokens <= 16 * 64:
        assert compressed + original == mine
    else:
        assert compressed + original == mine + 64 - tail


def test_bad_arguments_are_refused_naming_them():
    with pytest.raises(ValueError, match="local"):
        T.nsa_bytes(600, 32, 16, 64, 1, 2, 512, **ONE)
    with pytest.raises(ValueError, match="tokens"):
        T.dense_bytes(0, **GQA)
    with pytest.raises(ValueError, match="overlap"):
        T.nsa_bytes(600, **PAPER, **ONE, overlap="both")
    with pytest.raises(ValueError, match="gating"):
        T.moba_bytes(600, 64, 2, **ONE, gating="lazy")
    with pytest.raises(ValueError, match="layout"):
        T.block_bytes(600, 64, 2, index_bits=32, **ONE, layout="coo")
    with pytest.raises(TypeError, match="tokens"):
        T.dense_bytes(np.float64(4), **GQA)
    with pytest.raises(ValueError, match="int64"):
        T.dense_bytes(1 << 62, **GQA)
    with pytest.raises(ValueError, match="local"):
        T.nsa_tokens(600, selected=1, local=2)


@pytest.mark.deep
def test_the_roofline_count_passes_as_a_dense_kernel():
    """An independent correct kernel: the roofline area's KV bytes with one layer."""
    impl = Implementation("roofline kv_attention_bytes, one layer", {
        "sparse.traffic.dense": lambda tokens, kv_heads, head_dim, v_head_dim, element_bits: (
            T.dense_bytes(tokens, kv_heads, head_dim, v_head_dim, element_bits),  # the checks (tokens >= 1)
            kv_attention_bytes(tokens, np.ones_like(np.asarray(tokens)), kv_heads, head_dim, v_head_dim,
                               element_bits))[1]})
    report = run(impl, ops=["sparse.traffic.dense"], examples=20, shrink=False)
    assert report.ok, report.details()


@pytest.mark.parametrize("op", ["dense", "block", "nsa", "moba", "dsa"])
def test_the_generic_refusals_the_vectors_leave_out(op):
    """Bool, negative, float and broadcast counts (the roofline area's rule, not
    re-vectored here to keep golden/ small) are refused by the oracle and the default kernel."""
    from ref.conformance.adapters import numpy_sparse_traffic as kernel
    from ref.sparse.catalog.traffic import NAMES

    base = {"dense": dict(tokens=4, **GQA), "block": dict(tokens=100, block_size=64, blocks=2, index_bits=32, **GQA),
            "nsa": dict(tokens=600, **PAPER, **ONE), "moba": dict(tokens=100, chunk_size=64, top_k=2, **ONE),
            "dsa": dict(tokens=100, top_k=8, kv_lora_rank=512, qk_rope_head_dim=64, element_bits=16,
                        index_head_dim=128, index_bits=8, index_group=128, index_scale_bits=32)}[op]
    assert set(base) == set(NAMES[op])
    oracle = {"dense": T.dense_bytes, "block": T.block_bytes, "nsa": T.nsa_bytes, "moba": T.moba_bytes,
              "dsa": T.dsa_bytes}[op]
    second = NAMES[op][1]
    for bad, error in (({second: np.asarray(True)}, TypeError), ({"element_bits": np.asarray(-1)}, ValueError),
                       ({"tokens": np.asarray(4.0)}, TypeError), ({"tokens": np.asarray([4])}, ValueError)):
        for fn in (oracle, kernel.OPS[f"sparse.traffic.{op}"]):
            with pytest.raises(error):
                fn(**{**base, **bad})
