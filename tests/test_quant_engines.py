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

from ref.quant import awq as awq_oracle
from ref.quant import rtn

torch = pytest.importorskip("torch")


def _engine(module: str):
    """Import one library's module, or skip the test where it is not installed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # AutoAWQ's deprecation notice, torch.jit's
        return pytest.importorskip(module)


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


class _CopyingLinear(torch.nn.Linear):
    """A Linear whose state_dict holds copies, as `.cpu()` of a GPU tensor does."""

    def state_dict(self, *args, **kwargs):
        return {k: v.clone() for k, v in super().state_dict(*args, **kwargs).items()}


def _awq_scale_search(x, w, *, duo, linear=torch.nn.Linear, group=16):
    """AutoAWQ's _search_best_scale over one linear after a LayerNorm, in float64."""
    q = _awq_quantizer(group=group, duo=duo)
    lin = linear(w.shape[1], w.shape[0], bias=False).double()
    lin.weight.data = torch.tensor(w)
    norm = torch.nn.LayerNorm(w.shape[1]).double()
    parent = torch.nn.ModuleDict({"norm": norm, "fc": lin})
    prev, names, s = q._search_best_scale(parent, norm, [lin], torch.tensor(x).unsqueeze(0))
    assert (prev, names) == ("norm", ("fc",))
    return s.numpy()


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_autoawq_quantizer_is_the_oracles(bits):
    """pseudo_quantize_tensor at float64 = ref.quant.awq.quantize; at float32 = ref.quant.rtn
    (minmax range, span floor 1e-5) in float32, code for code."""
    rng = np.random.default_rng(bits)
    w = rng.standard_normal((8, 64)) * 2.0 ** rng.integers(-3, 3, (8, 1))
    w[0, :16] = 0.0  # an all-zero group: the 1e-5 span floor
    w[1, 16:32] = 0.25  # a constant group
    q = _awq_quantizer(bits=bits)
    wq, scales, zeros = q.pseudo_quantize_tensor(torch.tensor(w))
    codes, s_ref, z_ref = awq_oracle.quantize(w, bits=bits, group=16)
    np.testing.assert_array_equal(scales.numpy(), s_ref)
    np.testing.assert_array_equal(zeros.numpy(), z_ref)
    np.testing.assert_array_equal(wq.numpy(), awq_oracle.dequantize(codes, s_ref, z_ref))
    w32 = w[1:].astype(np.float32)  # rtn widens an all-zero group to [-1, 1] (GPTQ's rule)
    wq32, s32, z32 = q.pseudo_quantize_tensor(torch.tensor(w32))
    g = w32.reshape(7, 4, 16)
    scale, zero = rtn.params(g, bits=bits, zero_range="minmax", span_floor=1e-5)
    np.testing.assert_array_equal(s32.numpy(), scale)
    np.testing.assert_array_equal(z32.numpy(), zero)
    codes32 = rtn.quantize(g, scale, zero, bits=bits)
    np.testing.assert_array_equal(wq32.numpy().reshape(g.shape), rtn.dequantize(codes32, scale, zero))


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
        s = _awq_scale_search(x, w, duo=True, linear=_CopyingLinear)
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
    """_compute_best_clip (n_grid 20, max_shrink 0.5, every n // 512-th token) at float64:
    the oracle's thresholds exactly (rows a multiple of 64, as AutoAWQ asserts)."""
    for seed in range(3):
        x, w = _outlier_layer(seed, n=1100)  # 1100 // 512 = 2: every other token
        q = _awq_quantizer()
        max_val = q._compute_best_clip(torch.tensor(w), torch.tensor(x)).numpy()
        np.testing.assert_array_equal(max_val[..., 0], awq_oracle.search_clip(x, w, bits=4, group=16))


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
