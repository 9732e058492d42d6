"""The libraries people quantize with, run on CPU against the quant oracles (spec/quant.md,
"Engines"): llm-compressor 0.14.0.1's GPTQ, GPTQModel 7.7.0's GPTQ and quantizer, AutoAWQ
0.2.9's quantizer, scale search and clip search, HQQ 0.2.8.post1's Quantizer and
compressed-tensors 0.19.0's int32 packing. Each test skips where its library is not
installed (CI's "quant engines" stage installs them on top of the peers environment).

Where the library runs the same arithmetic as an oracle in the same precision the
results are compared exactly; where the precision or the order differs, by the rule
stated at the test; every divergence the fragment names is asserted on its minimal case.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from pathlib import Path

from ref.conformance.catalog import discover
from ref.conformance.report import parse_entries
from ref.quant import awq as awq_oracle
from ref.quant import rtn

try:
    import torch
except ImportError:  # every engine test skips (_engine); the xfails files are still checked
    torch = None

ADAPTERS = Path(__file__).resolve().parent.parent / "ref" / "conformance" / "adapters"
XFAILS = ("llmcompressor_gptq", "gptqmodel_gptq", "autoawq_awq", "autoawq_awq.as_on_gpu", "hqq_quantizer",
          "compressed_tensors_pack")


def _engine(module: str):
    """Import one library's module, or skip the test where it (or torch) is not installed."""
    pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # AutoAWQ's deprecation notice, torch.jit's
        return pytest.importorskip(module)


@pytest.mark.parametrize("name", XFAILS)
def test_each_xfails_file_names_catalog_ops_with_reasons(name):
    entries = parse_entries((ADAPTERS / f"{name}.xfails").read_text(), source=name)
    assert {e.op for e in entries} <= set(discover())


def _outlier_layer(seed: int, n: int = 64, cin: int = 32, cout: int = 64):
    """Calibration inputs with a few outlier channels (x8) and a Gaussian weight, float64."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, cin)) * np.where(rng.random(cin) < 0.15, 8.0, 1.0)
    return x, rng.standard_normal((cout, cin))


# ------------------------------------------------------------------ AutoAWQ 0.2.9


def _awq_quantizer(bits=4, group=16, duo=False, zero_point=True):
    """AutoAWQ's AwqQuantizer without its __init__ (which loads a model and a data set)."""
    quantizer = _engine("awq.quantize.quantizer").AwqQuantizer
    q = object.__new__(quantizer)
    q.w_bit, q.group_size, q.zero_point, q.duo_scaling = bits, group, zero_point, duo
    q.max_chunk_memory, q.n_parallel_calib_samples = 1 << 30, None
    return q


def _awq_scale_search(x, w, *, duo, copying=False, group=16):
    """AutoAWQ's _search_best_scale over one linear after a LayerNorm, in float64; with
    `copying`, the Linear's state_dict holds copies (as `.cpu()` of a GPU tensor does)."""
    q = _awq_quantizer(group=group, duo=duo)
    from ref.conformance.adapters.autoawq_awq import _CopyingLinear

    linear = _CopyingLinear if copying else torch.nn.Linear
    lin = linear(w.shape[1], w.shape[0], bias=False).double()
    lin.weight.data = torch.tensor(w)
    norm = torch.nn.LayerNorm(w.shape[1]).double()
    parent = torch.nn.ModuleDict({"norm": norm, "fc": lin})
    prev, names, s = q._search_best_scale(parent, norm, [lin], torch.tensor(x).unsqueeze(0))
    assert (prev, names) == ("norm", ("fc",))
    return s.numpy()


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_autoawq_quantizer_is_the_oracles(bits):
    """pseudo_quantize_tensor at float32 = ref.quant.awq.quantize (float32 arithmetic) and
    ref.quant.rtn (minmax range, span floor 1e-5) bit for bit, an all-zero and a constant
    group included."""
    rng = np.random.default_rng(bits)
    w = (rng.standard_normal((8, 64)) * 2.0 ** rng.integers(-3, 3, (8, 1))).astype(np.float32)
    w[0, :16] = 0.0  # an all-zero group: the 1e-5 span floor
    w[1, 16:32] = 0.25  # a constant group
    wq, scales, zeros = _awq_quantizer(bits=bits).pseudo_quantize_tensor(torch.tensor(w))
    codes, s_ref, z_ref = awq_oracle.quantize(w, bits=bits, group=16)
    np.testing.assert_array_equal(scales.numpy(), s_ref)
    np.testing.assert_array_equal(zeros.numpy(), z_ref)
    np.testing.assert_array_equal(wq.numpy(), awq_oracle.dequantize(codes, s_ref, z_ref))
    g = w.reshape(8, 4, 16)
    scale, zero = rtn.params(g, bits=bits, zero_range="minmax", span_floor=1e-5)
    np.testing.assert_array_equal(scales.numpy(), scale)
    np.testing.assert_array_equal(zeros.numpy(), zero)
    np.testing.assert_array_equal(rtn.quantize(g, scale, zero, bits=bits).reshape(w.shape), codes)


def test_autoawq_scale_search_plain_is_the_oracles():
    """Plain scaling (s = x_mean^alpha): AutoAWQ on CPU picks the oracle's alpha; its scales
    differ only by its float32 sum of |x| (relative 1e-6)."""
    for seed in range(3):
        x, w = _outlier_layer(seed)
        s = _awq_scale_search(x, w, duo=False)
        s_ref, _, _ = awq_oracle.search_scales(x, w, bits=4, group=16)
        np.testing.assert_allclose(s, s_ref, rtol=1e-6)


def test_autoawq_scale_search_duo_as_on_a_gpu_is_the_oracles():
    """Duo scaling with the module's state_dict copied (as `.cpu()` copies a GPU tensor):
    the oracle's alpha and scales."""
    for seed in range(3):
        x, w = _outlier_layer(seed)
        s = _awq_scale_search(x, w, duo=True, copying=True)
        s_ref, _, _ = awq_oracle.search_scales(x, w, bits=4, group=16, duo_scaling=True)
        np.testing.assert_allclose(s, s_ref, rtol=1e-6)


def test_autoawq_duo_scale_search_on_cpu_keeps_the_first_grid_points_weights():
    """AutoAWQ 0.2.9 bug (CPU only): _compute_best_scale saves the weights as
    `{k: v.cpu()}`, which on a CPU tensor is the tensor itself; the first grid point's
    in-place `fc.weight.mul_(scales)` then writes W * s(0) into that saved copy, and every
    later grid point restores and quantizes W * s(0) * s(alpha). Plain scaling escapes
    (s(0) = 1); duo scaling's s(0) = 1 / (w_mean + 1e-4) normalized does not. Minimal case:
    seed 0 below, where the oracle picks alpha 0.35 and AutoAWQ alpha 0."""
    x, w = _outlier_layer(0, cin=32)
    xm, wm = awq_oracle.activation_means(x), awq_oracle.weight_means(w, group=16)
    points = awq_oracle.candidates(duo_scaling=True)
    s0 = awq_oracle.scales_at(xm, wm, *points[0])

    def aliased_loss(i):  # the loss AutoAWQ measures at grid point i on CPU
        s = awq_oracle.scales_at(xm, wm, *points[i])
        ws = w * s if i == 0 else w * s0 * s
        return np.mean((x @ w.T - x @ (awq_oracle.fake_quantize(ws, bits=4, group=16) / s).T) ** 2)

    chosen = int(np.argmin([aliased_loss(i) for i in range(len(points))]))
    s = _awq_scale_search(x, w, duo=True)
    np.testing.assert_allclose(s, awq_oracle.scales_at(xm, wm, *points[chosen]), rtol=1e-6)
    _, choice, _ = awq_oracle.search_scales(x, w, bits=4, group=16, duo_scaling=True)
    assert (chosen, int(choice)) == (0, 7)


def test_autoawq_clip_search_is_the_oracles():
    """_compute_best_clip (n_grid 20, max_shrink 0.5, every n // 512-th token) at float32:
    the oracle's thresholds, by the catalog's rule (equal but for float32 ties between two
    shrink steps; rows a multiple of 64, as AutoAWQ asserts)."""
    from ref.quant.catalog.awq import compare_clip

    for seed in range(3):
        x, w = _outlier_layer(seed, n=1100)  # 1100 // 512 = 2: every other token
        x, w = x.astype(np.float32), w.astype(np.float32)
        max_val = _awq_quantizer()._compute_best_clip(torch.tensor(w), torch.tensor(x)).numpy()
        cmp = compare_clip(awq_oracle.search_clip(x, w, bits=4, group=16), max_val[..., 0])
        assert cmp.ok, cmp


# ------------------------------------------------------------------ GPTQModel 7.7.0's quantizer


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("sym", [False, True])
def test_gptqmodel_quantizer_is_rtn_include_zero(bits, sym):
    """Quantizer.find_params + quantize (the reference quant.py's min-max, range forced to
    include zero, all-zero groups widened to [-1, 1]) = ref.quant.rtn in float32."""
    config = _engine("gptqmodel.quantization.config")
    quantizer = _engine("gptqmodel.quantization.quantizer")
    rng = np.random.default_rng(10 * bits + sym)
    w = (rng.standard_normal((6, 32)) * 2.0 ** rng.integers(-4, 4, (6, 1))).astype(np.float32)
    w[0] = 0.0
    w[1] = np.abs(w[1])  # no negative weight: GPTQ's symmetric lo stays 0
    w[2] = -np.abs(w[2])
    q = quantizer.Quantizer(config.QuantizeConfig(bits=bits, sym=sym, group_size=-1))
    q.configure(perchannel=True)
    q.find_params(torch.tensor(w), weight=True)
    scheme = "symmetric" if sym else "asymmetric"
    scale, zero = rtn.params(w, bits=bits, scheme=scheme)
    np.testing.assert_array_equal(q.scale.numpy()[:, 0], scale)
    np.testing.assert_array_equal(q.zero.numpy()[:, 0], zero)
    deq = q.quantize(torch.tensor(w)).numpy()
    np.testing.assert_array_equal(deq, rtn.dequantize(rtn.quantize(w, scale, zero, bits=bits), scale, zero))


# ------------------------------------------------------------------ compressed-tensors 0.19.0


def test_compressed_tensors_pack_to_int32_hand_case():
    """Signed codes offset by 2^(b-1), packed LSB first, dense across int32 words."""
    helpers = _engine("compressed_tensors.compressors.pack_quantized.helpers")
    v = torch.tensor([[-8, -1, 0, 7, 3, -4, 5, 6, 1]], dtype=torch.int8)
    packed = helpers.pack_to_int32(v, 4)
    assert [x & 0xFFFFFFFF for x in packed[0].tolist()] == [0xED4BF870, 0x9]
    np.testing.assert_array_equal(helpers.unpack_from_int32(packed, 4, v.shape).numpy(), v.numpy())


# ------------------------------------------------------------------ GPTQ: llm-compressor 0.14.0.1, GPTQModel 7.7.0


def _gptq_case(seed: int, rows: int = 32, cols: int = 64, n: int = 256):
    """A layer with outlier input channels and its Hessian (2/n) X^T X rounded to float32
    (what the engines hold), as float64."""
    from ref.quant import gptq as gptq_oracle

    x, _ = _outlier_layer(seed, n=n, cin=cols)
    w = np.random.default_rng(seed + 100).standard_normal((rows, cols)).astype(np.float32)
    return w, gptq_oracle.hessian(x).astype(np.float32).astype(np.float64)


def _same_gptq(expected, actual, *, diverged_rows: int = 1):
    """codes, zeros and g_idx equal in all but `diverged_rows` rows (a float32 tie may flip
    one code and its row's trajectory); scales equal to 1e-6 and losses to 1e-4 elsewhere."""
    codes, scales, zeros, g_idx, losses = expected
    a_codes, a_scales, a_zeros, a_g_idx, a_losses = actual
    np.testing.assert_array_equal(a_g_idx, g_idx)
    bad = (a_codes != codes).any(axis=1) | (a_zeros != zeros).any(axis=1)
    assert bad.sum() <= diverged_rows, f"{bad.sum()} rows diverge"
    np.testing.assert_allclose(a_scales[~bad], scales[~bad], rtol=1e-6)
    np.testing.assert_allclose(a_losses[~bad], losses[~bad], rtol=1e-4)


SETTINGS = [dict(group=-1), dict(group=16, group_params="static"),
            dict(group=16, group_params="static", act_order=True), dict(group=32, group_params="static", bits=3),
            dict(group=-1, act_order=True, bits=8)]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_llmcompressor_gptq_is_the_oracle(settings):
    """quantize_weight with GPTQModifier's observer = ref.quant.gptq (static groups) in the
    asymmetric and compressed-tensors' symmetric schemes, code for code."""
    _engine("llmcompressor.modifiers.gptq.gptq_quantize")
    from ref.conformance.adapters import llmcompressor_gptq
    from ref.quant import gptq as gptq_oracle

    for scheme in ("asymmetric", "symmetric_compressed_tensors"):
        w, h = _gptq_case(len(SETTINGS) * 7 + len(scheme))
        kw = dict(settings, scheme=scheme)
        _same_gptq(gptq_oracle.gptq(w, h, **kw), llmcompressor_gptq.gptq(w, h, **kw))


@pytest.mark.parametrize("settings", SETTINGS + [dict(group=16, group_params="block_start"),
                                                 dict(group=16, group_params="block_start", act_order=True),
                                                 dict(group=32, group_params="block_start", search="mse")],
                         ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_gptqmodel_gptq_is_the_oracle(settings):
    """GPTQ.quantize with the reference's settings = ref.quant.gptq, GPTQ's symmetric and
    asymmetric schemes; its dynamic groups are the oracle's block_start."""
    _engine("gptqmodel.quantization.gptq")
    from ref.conformance.adapters import gptqmodel_gptq
    from ref.quant import gptq as gptq_oracle

    for scheme in ("asymmetric", "symmetric"):
        w, h = _gptq_case(3 + len(scheme))
        kw = dict(settings, scheme=scheme)
        _same_gptq(gptq_oracle.gptq(w, h, **kw), gptqmodel_gptq.gptq(w, h, **kw))


def test_gptqmodel_dynamic_groups_read_the_weights_at_the_block_start():
    """The reference's dynamic groups (GPTQModel, auto-gptq) take a group's params from W,
    which inside a lazy block lacks the block's pending updates: with groups of 16 in blocks
    of 128 most rows leave the oracle's "dynamic" trajectory; with blocks of 16 (every group
    starts a block) the two are one algorithm."""
    _engine("gptqmodel.quantization.gptq")
    from ref.conformance.adapters import gptqmodel_gptq
    from ref.quant import gptq as gptq_oracle

    w, h = _gptq_case(0)
    engine = gptqmodel_gptq.gptq(w, h, group=16, group_params="block_start", blocksize=128)
    dynamic = gptq_oracle.gptq(w, h, group=16, group_params="dynamic", blocksize=128)
    assert (engine[0] != dynamic[0]).any(axis=1).sum() > w.shape[0] // 2
    _same_gptq(gptq_oracle.gptq(w, h, group=16, group_params="dynamic", blocksize=16),
               gptqmodel_gptq.gptq(w, h, group=16, group_params="block_start", blocksize=16))


def test_gptqmodel_defaults_are_not_the_references():
    """GPTQModel 7.7.0's QuantizeConfig: damp_percent 0.05 (the reference: 0.01), retries
    with 0.01 more dampening at a time when Cholesky fails, and group-aware reordering (GAR)
    on whenever desc_act is off. The adapter sets the reference's values."""
    config = _engine("gptqmodel.quantization.config")
    cfg = config.QuantizeConfig(bits=4, group_size=128, offload_to_disk=False)
    assert (cfg.damp_percent, cfg.damp_auto_increment, cfg.desc_act, cfg.act_group_aware) == (0.05, 0.01, False, True)


def test_llmcompressor_falls_back_to_rtn_on_a_hessian_that_is_not_positive_definite():
    """Where the oracle refuses (ValueError), quantize_weight replaces the inverse factor by
    the identity (plain round-to-nearest with the observer's params) and flags it."""
    _engine("llmcompressor.modifiers.gptq.gptq_quantize")
    from ref.conformance.adapters import llmcompressor_gptq
    from ref.quant import gptq as gptq_oracle

    w, _ = _gptq_case(1, rows=4, cols=8)
    h = -np.eye(8)
    h[0, 0] = 1.0  # a negative diagonal: no dampening of 1% of the mean makes it positive definite
    with pytest.raises(ValueError):
        gptq_oracle.gptq(w, h, group=-1)
    q, scale, zero_point, _, _, fallback = llmcompressor_gptq.run(w, h, group=-1)
    assert fallback
    codes = rtn.quantize(w, scale.numpy()[:, 0], zero_point.numpy()[:, 0] + 8, bits=4)
    np.testing.assert_array_equal(q.numpy(), rtn.dequantize(codes, scale.numpy()[:, 0], zero_point.numpy()[:, 0] + 8))


def test_llmcompressor_observer_sees_dead_columns():
    """llm-compressor's observer finds static group parameters before quantize_weight zeroes
    the dead columns (H_ii = 0), so a dead column's weights still set its group's range; the
    oracle's static groups (and the reference's static_groups, GPTQModel's) are found after.
    Minimal case: input channel 27 never active, its weights 0.2 in a group of small weights."""
    _engine("llmcompressor.modifiers.gptq.gptq_quantize")
    from ref.conformance.adapters import llmcompressor_gptq
    from ref.quant import gptq as gptq_oracle

    rng = np.random.default_rng(5)
    w = (rng.integers(-40, 40, (8, 64)) / 1024).astype(np.float32)
    w[:, 27] = 0.2
    x = rng.standard_normal((128, 64))
    x[:, 27] = 0.0
    h = gptq_oracle.hessian(x).astype(np.float32).astype(np.float64)
    kw = dict(bits=3, group=8, group_params="static", blocksize=64)
    _, scales, _, _, _ = gptq_oracle.gptq(w, h, **kw)
    _, engine_scales, _, _, _ = llmcompressor_gptq.gptq(w, h, **kw)
    wg = w.reshape(8, 8, 8)
    np.testing.assert_array_equal(engine_scales[:, 3], rtn.params(wg[:, 3], bits=3, scheme="asymmetric",
                                                                  scale_floor="eps")[0])
    w0 = wg.copy()
    w0[:, 3, 3] = 0.0  # column 27 zeroed: the oracle's group
    np.testing.assert_array_equal(scales[:, 3], rtn.params(w0[:, 3], bits=3, scheme="asymmetric")[0])
    mask = np.ones(8, bool)
    mask[3] = False
    np.testing.assert_allclose(engine_scales[:, mask], scales[:, mask], rtol=1e-6)


# ------------------------------------------------------------------ the packed layouts


def test_gptqmodel_packs_the_oracles_words_and_borrows_in_v1():
    """TorchLinear.pack_original: qweight and v2 qzeros are the oracle's words (3-bit
    straddles included); its v1 writer subtracts 0x55555555 from whole words, so sixteen
    2-bit zero points of 0 give 0xaaaaaaab where the per-field v1 of the oracle is 0xffffffff."""
    _engine("gptqmodel.nn_modules.qlinear.torch")
    from ref.conformance.adapters import gptqmodel_gptq
    from ref.quant import packing

    rng = np.random.default_rng(7)
    for bits in (2, 3, 4, 8):
        codes = rng.integers(0, 1 << bits, (32, 64))
        zeros = rng.integers(1, 1 << bits, (32, 2))  # no zero point of 0: v1 is then one layout
        np.testing.assert_array_equal(gptqmodel_gptq.gptq_qweight(codes, bits=bits),
                                      packing.gptq_qweight(codes, bits=bits))
        for fmt in ("v1", "v2"):
            np.testing.assert_array_equal(gptqmodel_gptq.gptq_qzeros(zeros, bits=bits, zero_format=fmt),
                                          packing.gptq_qzeros(zeros, bits=bits, zero_format=fmt))
    zero = np.zeros((16, 1), np.int64)
    assert packing.gptq_qzeros(zero, bits=2, zero_format="v1").view(np.uint32)[0, 0] == 0xFFFFFFFF
    assert gptqmodel_gptq.gptq_qzeros(zero, bits=2, zero_format="v1").view(np.uint32)[0, 0] == 0xAAAAAAAB


def test_autoawq_packs_the_oracles_words_from_32_outputs_on():
    """WQLinear_GEMM.from_linear packs in AWQ's order (0 2 4 6 1 3 5 7) = ref.quant.packing.awq_pack
    for 32 and 64 outputs; it allocates out // 32 * 4 columns, so 8 outputs do not pack."""
    _engine("awq.modules.linear.gemm")
    from ref.conformance.adapters import autoawq_awq
    from ref.quant import packing

    rng = np.random.default_rng(8)
    for out in (32, 64):
        codes = rng.integers(0, 16, (out, 8))
        np.testing.assert_array_equal(autoawq_awq.awq_pack(codes), packing.awq_pack(codes))
        np.testing.assert_array_equal(autoawq_awq.awq_unpack(packing.awq_pack(codes)), codes)
    with pytest.raises(IndexError):
        autoawq_awq.awq_pack(np.repeat(np.arange(8)[:, None], 2, axis=1))
