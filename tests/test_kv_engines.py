"""The KV-cache quantizers people run, on CPU, against the kv oracles (spec/kv.md,
"Engines"): transformers 5.24's QuantizedCache with its optimum-quanto 0.2.7 backend
(KIVI's codec, another cache) and its HQQ 0.2.8.post1 backend (the HQQ oracle on the
flat cache tensor), and KIVI's own reference code (quant/new_pack.py, which needs a
checkout: KIVI_NEW_PACK). Each test skips where its engine is not installed; CI's
"quant engines" stage installs them.

Where the engine computes what an oracle computes, in the same dtype, the results are
compared bit for bit; every named difference is asserted on its minimal case.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from ref.conformance.catalog import discover
from ref.conformance.report import parse_entries
from ref.kv import kivi
from ref.kv.kivi_cache import KiviCache

ADAPTERS = Path(__file__).resolve().parent.parent / "ref" / "conformance" / "adapters"
XFAILS = ("transformers_kvcache", "kivi_reference")


def _engine(module: str):
    """Import an engine's module, or skip where it (or torch) is not installed."""
    pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip(module)


def _quanto():
    """The transformers_kvcache adapter (transformers + optimum-quanto), or a skip."""
    _engine("transformers")
    _engine("optimum.quanto")
    from ref.conformance.adapters import transformers_kvcache

    return transformers_kvcache


@pytest.mark.parametrize("name", XFAILS)
def test_each_xfails_file_names_catalog_ops_with_reasons(name):
    entries = parse_entries((ADAPTERS / f"{name}.xfails").read_text(), source=name)
    assert entries and {e.op for e in entries} <= set(discover())
    assert all(len(e.reason.split()) >= 8 for e in entries)


def _ints(rng, shape, dtype=np.float16, span=100):
    """Integers in [-span, span] times 2^-6: exact in float16."""
    return (rng.integers(-span, span + 1, shape) * 2.0**-6).astype(dtype)


# ------------------------------------------------------------------ quanto: KIVI's codec


def test_quanto_codec_is_kivis_bit_for_bit():
    """QuantizedCache's quanto quantizer with axis -1 (keys) and 0 (values) = kv.kivi.quantize
    with the channel and token axes, codes, scale and mn bit for bit, at float16, 32 and 64,
    2 and 4 bits; its dequantization = kv.kivi.dequantize. (Away from the single-group
    tensor, test_quanto_single_group_tensor_is_quantized_per_element.)"""
    tk = _quanto()
    rng = np.random.default_rng(15)
    for i in range(48):
        axis, bits = ("channel", "token")[i % 2], (2, 4)[i // 2 % 2]
        dtype = (np.float16, np.float32, np.float64)[i // 4 % 3]
        g = int(rng.choice([2, 4, 8, 16]))
        t, d = (g * int(rng.integers(1, 4)), int(rng.choice([1, 3, 8]))) if axis == "channel" else \
            (int(rng.choice([1, 3, 8])), g * int(rng.integers(1, 4)))
        x = _ints(rng, (1, 2, t, d), dtype, span=int(rng.choice([1, 3, 100, 2000])))
        if i % 5 == 0:
            x[0, 0, :g, :g] = x[0, 0, 0, 0]  # a constant group: code 0, decoded to mn
        got, want = tk.quantize(x, axis=axis, bits=bits, group=g), kivi.quantize(x, axis=axis, bits=bits, group=g)
        for a, e in zip(got, want):
            assert a.dtype == e.dtype and np.array_equal(a, e), (axis, bits, g, x.dtype)
        np.testing.assert_array_equal(tk.dequantize(*want, axis=axis, bits=bits, group=g),
                                      kivi.dequantize(*want, axis=axis, bits=bits, group=g))


def test_quanto_single_group_tensor_is_quantized_per_element():
    """quanto's AffineOptimizer drops the group axis when the grouped tensor has one row:
    a tensor of exactly G elements on axis 0 (a prompt of one token with B = H = 1 and
    D = G, in QuantizedCache's values) gets a min and max per element, scale 0 and every
    code 0: it decodes exactly and stores two floats an element. KIVI: one group."""
    _quanto()
    import torch
    from optimum.quanto import MaxOptimizer, qint2, quantize_weight

    x = torch.tensor([0.0, 1.0, 2.0, 3.0]).reshape(1, 1, 1, 4)
    scale, shift = MaxOptimizer()(x, qint2, 0, 4)
    q = quantize_weight(x, qint2, 0, scale, shift, 4)
    assert scale.flatten().tolist() == [0.0] * 4 and q._data.unpack().flatten().tolist() == [0] * 4
    assert torch.equal(q.dequantize(), x)
    codes, s, mn = kivi.quantize(x.numpy(), axis="token", bits=2, group=4)
    assert codes.ravel().tolist() == [0, 1, 2, 3] and s.ravel().tolist() == [1.0] and mn.ravel().tolist() == [0.0]
    x2 = torch.tensor([0.0, 1.0, 2.0, 3.0] * 2).reshape(1, 1, 2, 4)  # two groups: min/max per group
    assert MaxOptimizer()(x2, qint2, 0, 4)[0].flatten().tolist() == [1.0, 1.0]
    from transformers import LlamaConfig
    from transformers.cache_utils import QuantizedCache

    config = LlamaConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=1, num_key_value_heads=1)
    cache = QuantizedCache("quanto", config, nbits=2, axis_key=0, axis_value=0, q_group_size=4)
    cache.update(x, x, 0)  # a one-token prompt, B = H = 1, D = G: the default axes reach it
    assert cache.layers[0]._quantized_values._scale.flatten().tolist() == [0.0] * 4
    kivi_axes = QuantizedCache("quanto", config, nbits=2, axis_key=-1, axis_value=0, q_group_size=4)
    with pytest.raises(ValueError, match="divisor"):
        kivi_axes.update(x, x, 0)  # KIVI's key axis refuses 1 token first


def test_quanto_key_groups_cross_heads_when_g_does_not_divide_the_tokens():
    """quanto's axis -1 groups G consecutive rows of the flattened [B*H*T, D]: with T % G != 0
    (a prompt of P tokens, or the history at a flush) a group takes the last tokens of one
    head and the first of the next, so head 1 moves head 0's keys. KIVI refuses T % G != 0;
    quanto refuses only when B*H*T % G != 0."""
    tk = _quanto()
    k = np.array([0.0, 1.0, 3.0, 2.0, 0.5, 2.5, 1.5, 0.0], np.float32).reshape(1, 4, 2, 1)  # T = 2, G = 4
    moved = k.copy()
    moved[0, 1, 1, 0] = 9.0  # head 1's second token: in the group of head 0's two tokens
    assert tk.round_trip(k, axis="channel", bits=2, group=4)[0, 0, :, 0].tolist() == [0.0, 1.0]
    assert tk.round_trip(moved, axis="channel", bits=2, group=4)[0, 0, :, 0].tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="group"):
        kivi.quantize(k, axis="channel", bits=2, group=4)
    with pytest.raises(ValueError, match="divisor"):
        tk.quantize(k[:, :3], axis="channel", bits=2, group=4)  # 3 heads * 2 tokens: not a multiple of 4


def test_quanto_value_groups_span_tokens_when_g_exceeds_the_head_dim():
    """quanto's axis 0 groups G consecutive elements of the flat tensor: with D < G (head dim
    64, q_group_size 128, say) a value group spans G / D tokens. KIVI refuses D % G != 0."""
    tk = _quanto()
    v = np.array([[0.0, 3.0], [1.0, 2.0], [0.0, 1.0], [2.0, 3.0]], np.float32).reshape(1, 1, 4, 2)
    moved = v.copy()
    moved[0, 0, 1, 1] = 6.0  # token 1 widens token 0's group: scale 2, and 3 / 2 rounds to 2
    assert tk.round_trip(v, axis="token", bits=2, group=4)[0, 0, 0].tolist() == [0.0, 3.0]
    assert tk.round_trip(moved, axis="token", bits=2, group=4)[0, 0, 0].tolist() == [0.0, 4.0]
    with pytest.raises(ValueError, match="group"):
        kivi.quantize(v, axis="token", bits=2, group=4)


def test_quantized_cache_defaults_quantize_keys_per_token():
    """QuantizedCache("quanto") defaults to axis_key = axis_value = 0 (nbits 4, groups of 64,
    residual 128): keys are grouped like values, G channels of one token (KIVI's keys: G
    tokens of one channel). An outlier in channel 1 of token 0 moves token 0's channel 2,
    not token 1's."""
    _quanto()
    import torch
    from transformers import LlamaConfig
    from transformers.cache_utils import QuantizedCache

    config = LlamaConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=1, num_key_value_heads=1)
    layer = QuantizedCache("quanto", config).layers[0]
    assert (layer.nbits, layer.axis_key, layer.axis_value, layer.q_group_size, layer.residual_length) == \
        (4, 0, 0, 64, 128)
    k = (torch.arange(2 * 64, dtype=torch.float32).reshape(1, 1, 2, 64) % 15) / 16
    moved = k.clone()
    moved[0, 0, 0, 1] = 64.0
    a, b = (layer._quantize(x, axis=layer.axis_key).dequantize() for x in (k, moved))
    assert a[0, 0, 0, 2] != b[0, 0, 0, 2] and torch.equal(a[0, 0, 1], b[0, 0, 1])


# ------------------------------------------------------------------ QuantizedCache: another cache


def _requantizing_cache(steps, *, bits, group, residual):
    """transformers' QuantizedLayer.update over KIVI's codec (keys per channel, values per
    token): the prompt quantized whole; decodes appended to one residual buffer; when it
    reaches R, the dequantized history and the buffer quantized again, as one tensor.
    Yields (full-precision tokens, keys view, values view) after each step."""
    def round_trip(x, axis):
        return kivi.dequantize(*kivi.quantize(x, axis=axis, bits=bits, group=group), axis=axis, bits=bits,
                               group=group)

    hist = None
    for k, v in steps:
        if hist is None:
            hist, buf = (round_trip(k, "channel"), round_trip(v, "token")), (k[:, :, :0], v[:, :, :0])
        else:
            buf = (np.concatenate([buf[0], k], 2), np.concatenate([buf[1], v], 2))
            if buf[0].shape[2] >= residual:
                hist = (round_trip(np.concatenate([hist[0], buf[0]], 2), "channel"),
                        round_trip(np.concatenate([hist[1], buf[1]], 2), "token"))
                buf = (buf[0][:, :, :0], buf[1][:, :, :0])
        yield buf[0].shape[2], np.concatenate([hist[0], buf[0]], 2), np.concatenate([hist[1], buf[1]], 2)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_quantized_cache_is_kivis_codec_requantized_at_every_flush(dtype):
    """At every step of a prompt of 12 tokens and 13 decodes (G = 4, R = 8, 2 heads), the
    cache QuantizedCache holds is exactly `_requantizing_cache` over kv.kivi's codec; its
    counts differ from KIVI's from the prefill on: the prompt all quantized (KIVI: 8 keys
    and 4 values), one buffer for keys and values flushed at R (KIVI's values at R + 1)."""
    tk = _quanto()
    rng = np.random.default_rng(16)
    steps = [(_ints(rng, (1, 2, 12, 4), dtype), _ints(rng, (1, 2, 12, 4), dtype))]
    steps += [(_ints(rng, (1, 2, 1, 4), dtype), _ints(rng, (1, 2, 1, 4), dtype)) for _ in range(13)]
    engine = tk.Cache(bits_k=2, bits_v=2, group=4, residual=8, dtype=dtype)
    oracle = KiviCache(bits_k=2, bits_v=2, group=4, residual=8, dtype=dtype)
    counts, kivi_counts = [], []
    for i, ((k, v), (full, keys, values)) in enumerate(zip(steps, _requantizing_cache(steps, bits=2, group=4,
                                                                                       residual=8))):
        obs = engine.prefill(k, v) if i == 0 else engine.decode(k, v)
        ref = oracle.prefill(k, v) if i == 0 else oracle.decode(k, v)
        assert obs["full_keys"] == full
        np.testing.assert_array_equal(np.array(obs["keys"]), keys.astype(np.float64))
        np.testing.assert_array_equal(np.array(obs["values"]), values.astype(np.float64))
        counts.append((obs["quantized_keys"], obs["full_keys"], obs["quantized_values"], obs["full_values"]))
        kivi_counts.append((ref["quantized_keys"], ref["full_keys"], ref["quantized_values"], ref["full_values"]))
    assert counts[0] == (12, 0, 12, 0) and kivi_counts[0] == (8, 4, 4, 8)
    assert counts[7] == (12, 7, 12, 7) and counts[8] == (20, 0, 20, 0)  # flush when the buffer reaches R
    assert kivi_counts[4] == (16, 0, 8, 8) and kivi_counts[5] == (16, 1, 9, 8)


def test_quantized_cache_prefill_returns_the_prompt_unquantized():
    """update() on an empty layer returns the prompt's own keys and values: the prefill
    attends in full precision; the next step reads them dequantized."""
    tk = _quanto()
    import torch

    rng = np.random.default_rng(17)
    k, v = (torch.from_numpy(_ints(rng, (1, 2, 8, 4), np.float32)) for _ in range(2))
    cache = tk.new_cache(bits_k=2, bits_v=2, group=4, residual=8)
    keys, values = cache.update(k, v, 0)
    assert torch.equal(keys, k) and torch.equal(values, v)
    keys, _ = cache.update(k[:, :, :1], v[:, :, :1], 0)
    want = kivi.dequantize(*kivi.quantize(k.numpy(), axis="channel", bits=2, group=4), axis="channel", bits=2,
                           group=4)
    np.testing.assert_array_equal(keys[:, :, :8].numpy(), want)


def test_quantized_cache_flush_moves_the_history():
    """A flush quantizes the dequantized history again; in float16 its group max need not
    decode to itself, so the history drifts: one channel of 4 float16 keys, 2 bits, G = R = 4,
    token 2 decodes to 0.213623046875 after the prefill and 0.2137451171875 after the flush."""
    tk = _quanto()
    k = (np.array([11, 56, 42, 11]) * 2.0**-6).astype(np.float16).reshape(1, 1, 4, 1) / np.float16(3)
    cache = tk.Cache(bits_k=2, bits_v=2, group=4, residual=4, dtype="float16")
    first = cache.prefill(k, k)["keys"]
    for _ in range(4):
        last = cache.decode(np.zeros((1, 1, 1, 1), np.float16), np.zeros((1, 1, 1, 1), np.float16))
    assert first[0][0][2] == [0.213623046875] and last["keys"][0][0][2] == [0.2137451171875]
    assert last["quantized_keys"] == 8 and last["full_keys"] == 0


# ------------------------------------------------------------------ QuantizedCache("hqq")


def _hqq_layer_quantize(x, axis, bits, group):
    """HQQQuantizedLayer._quantize as update() calls it, unpacked: (codes, meta, dequantized)."""
    _engine("transformers")
    _engine("hqq")
    import torch
    from hqq.core.quantize import Quantizer
    from transformers.cache_utils import HQQQuantizedLayer

    layer = HQQQuantizedLayer(nbits=bits, axis_key=axis, axis_value=axis, q_group_size=group, residual_length=group)
    t = torch.from_numpy(x)
    layer.lazy_initialization(t, t)
    q, meta = layer._quantize(t.contiguous(), axis=axis)
    codes = Quantizer.unpack[meta["packing"]](q, dtype=torch.uint8).numpy()
    return codes, meta, layer._dequantize((q, meta)).numpy()


@pytest.mark.parametrize("axis", [1, 0])
@pytest.mark.parametrize("bits", [2, 4])
def test_hqq_backend_is_the_hqq_oracle_on_the_flat_cache(axis, bits):
    """HQQQuantizedLayer quantizes the [B, H, T, D] tensor as hqq's Quantizer does a weight
    (optimize=True, float32): ref.quant.hqq.quantize of the tensor, codes equal on inputs
    float32 decides as float64 does (ref.quant.catalog.hqq.conditioned), dequantized values
    within 1e-6 relative. Axis 1: G consecutive channels of a token; axis 0: elements j,
    j + numel/G, ... (strided across tokens and heads). Neither is KIVI's min/max code."""
    from ref.quant import hqq
    from ref.quant.catalog.hqq import conditioned

    rng = np.random.default_rng(bits * 2 + axis)
    checked = 0
    while checked < 3:
        x = (rng.integers(-2**20, 2**20 + 1, (4, 1, 2, 16, 8)).sum(0) * 2.0**-24).astype(np.float32)
        if not conditioned(x, bits=bits, group=8, axis=axis):
            continue
        codes, meta, dq = _hqq_layer_quantize(x, axis, bits, 8)
        c, s, z = hqq.quantize(x, bits=bits, group=8, axis=axis)
        np.testing.assert_array_equal(codes[:c.shape[0]], c)
        r = hqq.dequantize(c, s.astype(np.float32), z.astype(np.float32)).reshape(x.shape)
        np.testing.assert_allclose(dq, r, rtol=0, atol=1e-6 * np.abs(r).max())
        checked += 1


def test_hqq_backend_couples_heads_through_its_solver():
    """HQQ's solver stops on the mean error of the whole tensor, so one head's zero points
    depend on the other heads: head 0 of this cache [1, 2, 4, 4] (eighths, 2 bits, G = 4,
    axis 1) gets the zero 1.25553 for its token 2 with head 1 beside it and 1.25 alone."""
    from ref.quant import hqq

    ints = [-4, -4, -4, -8, -1, -7, -4, -6, 8, -1, -7, 5, -7, -2, 2, -6,
            -7, -6, 6, 8, 3, 2, 4, -3, 8, 6, 3, 8, -7, 1, 8, -1]
    x = (np.array(ints) / 8).astype(np.float32).reshape(1, 2, 4, 4)
    _, both, _ = _hqq_layer_quantize(x, 1, 2, 4)
    _, alone, _ = _hqq_layer_quantize(np.ascontiguousarray(x[:, :1]), 1, 2, 4)
    z_both, z_alone = both["zero"].numpy().ravel()[:4], alone["zero"].numpy().ravel()
    np.testing.assert_allclose(z_alone, [6, 3.5, 1.25, 7 / 3], rtol=1e-6)
    np.testing.assert_allclose(z_both, [6, 3.5, 1.25553009, 7 / 3], rtol=1e-6)
    np.testing.assert_allclose(z_both, hqq.quantize(x, bits=2, group=4, axis=1)[2].ravel()[:4], rtol=1e-6)


def test_hqq_backend_loses_rows_its_bit_packing_cannot_split():
    """QuantizedCache("hqq") packs the codes (bitpack=True): rows of numel/G split into 8 / b
    slices, so a cache of 1 row at 4 bits (one token, B = H = 1, D = G = 4) packs to nothing
    without an error, and the next update fails dequantizing it."""
    _engine("transformers")
    _engine("hqq")
    import torch
    from transformers import LlamaConfig
    from transformers.cache_utils import QuantizedCache

    config = LlamaConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=1, num_key_value_heads=1)
    cache = QuantizedCache("hqq", config, nbits=4, axis_key=1, axis_value=1, q_group_size=4, residual_length=8)
    k = torch.tensor([[[[0.0, 0.25, 0.5, 0.75]]]])
    cache.update(k, k, 0)
    assert cache.layers[0]._quantized_keys[0].numel() == 0
    with pytest.raises(RuntimeError, match="invalid for input of size 0"):
        cache.update(k, k, 0)


# ------------------------------------------------------------------ KIVI's reference code


def _kivi_reference():
    _engine("torch")
    if not os.environ.get("KIVI_NEW_PACK"):
        pytest.skip("KIVI_NEW_PACK: the path of KIVI's quant/new_pack.py (a repository checkout) is not set")
    from ref.conformance.adapters import kivi_reference

    return kivi_reference


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_kivi_reference_is_the_oracle(bits):
    """quant_and_pack_kcache / _vcache and unpack_and_dequant_* at float16 = kv.kivi's
    quantize, pack and dequantize bit for bit (int32 words in the reference's layout)."""
    kr = _kivi_reference()
    import torch

    rng = np.random.default_rng(bits)
    for axis, quant, dequant in (("channel", "quant_and_pack_kcache", "unpack_and_dequant_kcache"),
                                 ("token", "quant_and_pack_vcache", "unpack_and_dequant_vcache")):
        x = _ints(rng, (1, 2, 32, 32))
        words, scale, mn = kr.REF[quant](torch.from_numpy(x), 8, bits)
        codes, s, m = kivi.quantize(x, axis=axis, bits=bits, group=8)
        np.testing.assert_array_equal(words.numpy(), kivi.pack(codes, axis=axis, bits=bits))
        np.testing.assert_array_equal(scale.squeeze(kr.GROUP_DIM[axis]).numpy(), s)
        np.testing.assert_array_equal(mn.squeeze(kr.GROUP_DIM[axis]).numpy(), m)
        np.testing.assert_array_equal(kr.REF[dequant](words, scale, mn, 8, bits).numpy(),
                                      kivi.dequantize(codes, s, m, axis=axis, bits=bits, group=8))


def test_kivi_reference_constant_group_on_a_cpu_corrupts_its_word():
    """Keys 0..7 of channel 2 constant (2 bits, G = 8): the reference divides 0 by 0 and, on a
    CPU, casts NaN to INT_MIN; packing ORs its bit 31 into code 15 of the word, so token 15
    (another group) decodes 2 steps above its value. On CUDA NaN casts to 0, as the oracle."""
    kr = _kivi_reference()
    import torch

    x = _ints(np.random.default_rng(8), (1, 1, 16, 4))
    x[0, 0, :8, 2] = 1.5
    x[0, 0, 15, 2] = x[0, 0, 8:, 2].min()  # token 15 takes code 0
    words, scale, mn = kr.REF["quant_and_pack_kcache"](torch.from_numpy(x), 8, 2)
    codes, s, m = kivi.quantize(x, axis="channel", bits=2, group=8)
    got = kr.REF["unpack_tensor"](words, 2, pack_dim=2).numpy()
    assert codes[0, 0, 15, 2] == 0 and got[0, 0, 15, 2] == 2
    diff = got != codes
    assert diff.sum() == 1 and diff[0, 0, 15, 2]


# ------------------------------------------------------------------ QJL's reference code


def test_qjl_reference_sketch_and_packing_are_the_oracles():
    """QJL's only pure-torch encoder, QJLSketch.qjl_qunatize (models/llama3_utils_qjl.py;
    its scores are CUDA kernels), on integer keys and an integer projection (exact in
    float32): its packed inlier bytes = ref.kv.qjl.pack_signs of sketch_outliers' signs
    (bit = S k > 0, so 0 packs as -1; LSB first), and its outlier bytes = those of the
    first m / 2 rows (the torch path keeps m / 16 bytes). Needs QJL_LLAMA3_UTILS, the path
    of that file in a checkout; its one `device='cuda'` is dropped here."""
    torch = _engine("torch")
    qjl = pytest.importorskip("ref.kv.qjl")
    path = os.environ.get("QJL_LLAMA3_UTILS")
    if not path:
        pytest.skip("QJL_LLAMA3_UTILS: the path of QJL's models/llama3_utils_qjl.py is not set")
    import ast

    tree = ast.parse(Path(path).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "QJLSketch")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "qjl_qunatize")

    class CpuTorch:  # torch, but arange ignores the hard-coded device
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def arange(*args, device=None, **kwargs):
            return torch.arange(*args, **kwargs)

    scope = {"torch": CpuTorch()}
    exec(compile(ast.Module([fn], type_ignores=[]), path, "exec"), scope)
    rng = np.random.default_rng(18)
    b, h, groups, g, d, m = 1, 2, 2, 4, 8, 16
    k = rng.integers(-3, 4, (b, h, groups * g, d)).astype(np.float32)
    k[0, 0, 1] = 0.0  # an all-zero key: every projection 0, every bit -1
    S = rng.integers(-2, 3, (m, d)).astype(np.float32)
    outliers = np.zeros((b, h, groups, d), bool)
    outliers[..., :2] = True
    inlier, outlier = scope["qjl_qunatize"](None, torch.from_numpy(k).reshape(b, h, groups, g, d),
                                            torch.from_numpy(outliers.astype(np.float32)), torch.from_numpy(S))
    signs, _, out_signs, _ = qjl.sketch_outliers(k, S, outliers, m // 2)
    np.testing.assert_array_equal(inlier.numpy().reshape(b, h, groups * g, m // 8), qjl.pack_signs(signs))
    np.testing.assert_array_equal(outlier.numpy().reshape(b, h, groups * g, m // 16), qjl.pack_signs(out_signs))
    assert qjl.pack_signs(signs)[0, 0, 1].tolist() == [0, 0]


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_kivi_reference_cache_is_kivi_cache(dtype):
    """LlamaAttention_KIVI.forward (models/llama_kivi.py, the file beside KIVI_NEW_PACK's
    quant/; its Triton quantizer and CUDA gemv stood in for by the reference's own pure-torch
    quantizer and a dequantize-then-matmul) keeps, after a prefill of 37 tokens and each of
    40 decodes (2 heads, D = 16, G = 8, R = 16, 2-bit keys, 4-bit values), the counts and the
    dequantized [quantized | full] keys and values of kv.kivi.cache, bit for bit."""
    kr = _kivi_reference()
    if kr.ATTENTION is None:
        pytest.skip(f"no models/llama_kivi.py beside KIVI_NEW_PACK ({kr.MODEL})")
    rng = np.random.default_rng(19)
    params = {"bits_k": 2, "bits_v": 4, "group": 8, "residual": 16, "dtype": dtype}
    engine, oracle = kr.Cache(**params), KiviCache(**params)
    for step in range(41):
        k, v = (_ints(rng, (1, 2, 37 if step == 0 else 1, 16), np.float64) for _ in range(2))
        got = engine.prefill(k, v) if step == 0 else engine.decode(k, v)
        want = oracle.prefill(k, v) if step == 0 else oracle.decode(k, v)
        assert got == want, step
