"""transformers' DeepseekV32Indexer against sparse.dsa.indexer (quant "none"), its two
named divergences (short rows, ties) asserted as they are, and a torch implementation of
the FP8 indexer (DeepSeek's act_quant and fp8_index order, in torch) as a correct
alternative. Runs in the peers stage (torch, transformers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ref.conformance.adapters import transformers_dsa  # noqa: E402
from ref.conformance.implementation import Implementation, load_implementation  # noqa: E402
from ref.conformance.report import parse_entries  # noqa: E402
from ref.conformance.runner import run  # noqa: E402
from ref.sparse import dsa_indexer as di  # noqa: E402
from ref.sparse.catalog.dsa import indexer_inputs, margin_ok  # noqa: E402

XFAILS = Path(transformers_dsa.__file__).with_suffix(".xfails")


def test_adapter_passes_under_its_xfails():
    impl = load_implementation("ref.conformance.adapters.transformers_dsa")
    report = run(impl, ops=["sparse.dsa.indexer"], examples=10, xfails=parse_entries(XFAILS.read_text(), source=str(XFAILS)))
    assert report.ok


def test_clear_prefill_and_decode_agree_with_the_op():
    rng = np.random.default_rng(7)
    for t, s in ((2, 8), (1, 6), (3, 7)):  # every row sees at least topk keys
        p = {"topk": 2, "rope_dim": 8, "quant": "none"}
        x = indexer_inputs(rng, 1, t, s, 4, 16, 8)
        x["w"] = np.abs(x["w"]) + 1  # no all-zero weights: fewer ties
        if not margin_ok(x, p):
            continue
        assert np.array_equal(np.sort(transformers_dsa.indexer(**x, **p), axis=-1), di.indexer(**x, **p))


def test_short_rows_return_masked_indices_where_the_op_pads():
    rng = np.random.default_rng(8)
    x = indexer_inputs(rng, 1, 3, 3, 1, 16, 8)
    got = transformers_dsa.indexer(**x, topk=3, rope_dim=8, quant="none")
    want = di.indexer(**x, topk=3, rope_dim=8, quant="none")
    assert want[0, 0].tolist() == [0, -1, -1]
    assert sorted(got[0, 0].tolist()) == [0, 1, 2]  # the two future tokens, masked to -inf, still returned


def _act_quant(x, block, ue8m0):
    shape = x.shape
    blocks = x.float().reshape(*shape[:-1], shape[-1] // block, block)
    amax = blocks.abs().amax(-1).clamp(min=1e-4)
    s = amax * torch.tensor(1 / 448, dtype=torch.float32)
    if ue8m0:
        s = torch.exp2(torch.ceil(torch.log2(s)))
    y = (blocks / s[..., None]).clamp(-448, 448).to(torch.float8_e4m3fn).float()
    return y.reshape(shape), s


def _torch_indexer(q, k, w, cos, sin, topk=1, rope_dim=64, pairing="neox", quant="fp8", scale_fmt="ue8m0",
                   block_size=128, scale=None, causal=True):
    """DeepSeek's Indexer in torch: RoPE, Hadamard (dense Sylvester matrix), act_quant, and
    fp8_index's order (ReLU(q_fp8 . k_fp8) * w * q_scale * scale, summed over heads, times k_scale)."""
    if quant != "fp8" or pairing != "neox":
        raise NotImplementedError
    q, k, w = (torch.tensor(np.ascontiguousarray(a, np.float32)) for a in (q, k, w))
    c, s_ = torch.tensor(np.ascontiguousarray(cos, np.float32)), torch.tensor(np.ascontiguousarray(sin, np.float32))
    t, n, hi, d = q.shape[1], k.shape[1], q.shape[2], q.shape[3]
    if q.shape[3] != block_size or t == 0:
        raise NotImplementedError

    def rope(x, cc, ss):  # x [B, L, H, D]
        h = rope_dim // 2
        a, b = x[..., :h], x[..., h:rope_dim]
        cc, ss = cc[None, :, None], ss[None, :, None]
        return torch.cat([a * cc - b * ss, b * cc + a * ss, x[..., rope_dim:]], dim=-1)
    had = torch.tensor(np.kron(*[np.array([[1, 1], [1, -1]])] * 2) if d == 4 else
                       np.array(_sylvester(d)), dtype=torch.float32) * d ** -0.5
    qr = rope(q, c[n - t:], s_[n - t:]) @ had.T
    kr = (rope(k[:, :, None], c, s_) @ had.T)[:, :, 0]
    qv, qs = _act_quant(qr, block_size, scale_fmt == "ue8m0")
    kv, ks = _act_quant(kr, block_size, scale_fmt == "ue8m0")
    sc = (d * hi) ** -0.5 if scale is None else scale
    logits = torch.relu(torch.einsum("bthd,bsd->bths", qv, kv))
    scores = torch.einsum("bth,bths->bts", w * qs[..., 0] * sc, logits) * ks[..., 0][:, None, :]
    scores = scores.double().numpy()
    return di.select(scores, topk=topk, causal=causal)


def _sylvester(d):
    h = np.ones((1, 1))
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    return h


def test_a_torch_fp8_indexer_passes():
    impl = Implementation("torch FP8 indexer", {"sparse.dsa.indexer": _torch_indexer},
                          variants={"sparse.dsa.indexer": {"pairing": ["neox"], "quant": ["fp8"],
                                                           "scale_fmt": ["ue8m0", "float"]}})
    assert run(impl, ops=["sparse.dsa.indexer"], examples=10).ok
