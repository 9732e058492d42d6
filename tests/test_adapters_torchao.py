"""The real-engine adapters for torch's casts and torchao's MX and NVFP4 codecs: each
passes `conform` with its shipped xfails, and each divergence the spec's engines
table names is re-measured here, bit for bit, against the installed torchao."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchao")

from torchao.prototype.mx_formats.config import ScaleCalculationMode  # noqa: E402
from torchao.prototype.mx_formats.mx_tensor import to_mx  # noqa: E402
from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale  # noqa: E402

from ref.conformance.implementation import Implementation, load_implementation  # noqa: E402
from ref.conformance.runner import parse_entries, run  # noqa: E402
from ref.formats import encode, mx, nvfp4  # noqa: E402
from ref.formats.catalog.nvfp4_ties import torchao_order_ties  # noqa: E402

ADAPTERS = Path(__file__).resolve().parents[1] / "ref" / "conformance" / "adapters"


def _conform(name: str, **kwargs):
    impl = load_implementation(f"ref.conformance.adapters.{name}")
    xfails = parse_entries((ADAPTERS / f"{name}.xfails").read_text())
    return impl, run(impl, shrink=False, xfails=xfails, **kwargs)


def test_importing_ref_and_its_catalog_does_not_import_torch():
    code = ("import sys, ref, ref.conformance.adapters, ref.conformance.catalog as c; c.discover(); "
            "assert 'torch' not in sys.modules and 'torchao' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_xfail_line_names_a_reason():
    for path in ADAPTERS.glob("*.xfails"):
        for entry in parse_entries(path.read_text(), inactive=True):
            assert len(entry.reason.split()) >= 4, (path.name, entry)


def test_torch_casts_pass_under_their_declared_variants():
    impl, report = _conform("torch_casts", examples=15)
    assert report.ok, report.details()
    verdicts = [r.verdict for r in report.ops if r.verdict != "not covered"]
    assert verdicts.count("pass") == len(impl.ops) - 1 and verdicts.count("xfail") == 1


def test_torchao_mx_passes_with_its_xfails():
    _, report = _conform("torchao_mx", ops=["formats.mx*"], examples=10)
    assert report.ok, report.details()
    verdicts = {r.op: r.verdict for r in report.ops}
    assert {verdicts[f"formats.{e}.dequantize"] for e in ("mxfp4", "mxfp6_e2m3", "mxfp8_e4m3")} == {"pass"}
    assert verdicts["formats.mxfp8_e4m3.quantize"] == "xfail"
    assert verdicts["formats.mxint8.quantize"] == "not covered"
    assert min(r.vectors_passed for r in report.ops if r.op.endswith(".quantize") and "int8" not in r.op) >= 40


def test_torchao_nvfp4_passes_with_its_xfails():
    _, report = _conform("torchao_nvfp4", ops=["formats.nvfp4.quantize"], examples=10)
    assert report.ok, report.details()
    assert report.ops[0].vectors_passed >= 8
    _, report = _conform("torchao_nvfp4", ops=["formats.nvfp4.dequantize"], examples=0)
    assert report.ok, report.details()
    assert report.ops[0].vectors_passed >= 2


def test_torchao_018_is_rejected_under_the_torchao_013_recipe():
    module = load_implementation("ref.conformance.adapters.torchao_nvfp4")
    impl = Implementation("torchao as 0.13", module.ops, {"formats.nvfp4.quantize": {"recipe": ["torchao_0_13"]}},
                          module.dtypes)
    report = run(impl, ops=["formats.nvfp4.quantize"], examples=0)
    failures = [f for f in report.ops[0].failures if "GlobalAmax" not in f.flags]
    assert failures and all("RecipeOrder" in f.flags for f in failures), report.details()


def _torchao_nvfp4(x: np.ndarray, per_tensor_scale):
    scales, packed = nvfp4_quantize(torch.from_numpy(x), 16, per_tensor_scale)
    return packed.numpy(), scales.view(torch.uint8).numpy()


def _packed(codes: np.ndarray) -> np.ndarray:
    return codes[..., ::2] | (codes[..., 1::2] << 4)


@pytest.mark.parametrize("amax", [100.0, 2688.0])
def test_torchao_nvfp4_is_the_017_recipe_with_and_without_a_global_scale(amax):
    """Two-level (p = amax / 2688) and single-level (no p: the recipe with p = 1, a
    tensor amax of 2688) both multiply by the reciprocal; 0.13's division differs."""
    x = torchao_order_ties(np.float32(amax), np.random.default_rng(11))
    p = per_tensor_amax_to_scale(torch.tensor(np.float32(amax))) if amax != 2688.0 else None
    packed, scales = _torchao_nvfp4(x, p)
    new = nvfp4.quantize(x, recipe="torchao_0_17")
    old = nvfp4.quantize(x, recipe="torchao_0_13")
    assert np.array_equal(scales, new[1]) and np.array_equal(packed, _packed(new[0]))
    assert not np.array_equal(packed, _packed(old[0]))


def test_torchao_nvfp4_nan_tensor_amax_poisons_every_block():
    x = np.random.default_rng(12).standard_normal((2, 32)).astype(np.float32)
    x[0, 3] = np.nan
    p = per_tensor_amax_to_scale(torch.max(torch.abs(torch.from_numpy(x))))
    _, scales = _torchao_nvfp4(x, p)
    assert ((scales & 0x7F) == 0x7F).all()  # every block NaN (either sign); the oracle: only block (0, 0)
    assert (nvfp4.quantize(x, recipe="torchao_0_17")[1] == 0x7F).sum() == 1


def test_torchao_nvfp4_dequantize_rounds_twice():
    adapter = load_implementation("ref.conformance.adapters.torchao_nvfp4").ops["formats.nvfp4.dequantize"]
    codes = np.tile(np.arange(16, dtype=np.uint8), (4, 2))
    scales = np.uint8([[0x31, 0x45], [0x5B, 0x2D], [0x66, 0x12], [0x3C, 0x49]])
    got = adapter(codes, scales, np.float32(13.7), recipe="torchao_0_17", order="scale_first")
    first = nvfp4.dequantize(codes, scales, np.float32(13.7), recipe="torchao_0_17", order="scale_first")
    exact = nvfp4.dequantize(codes, scales, np.float32(13.7), recipe="torchao_0_17")
    assert np.array_equal(got, first) and not np.array_equal(got, exact.astype(np.float32))


def _torchao_mx(x: np.ndarray, mode: str):
    scales, data = to_mx(torch.from_numpy(x), torch.float8_e4m3fn, 32, ScaleCalculationMode(mode))
    return data.view(torch.uint8).numpy(), scales.view(torch.uint8).numpy()


def test_torchao_mx_inf_block_gets_a_finite_scale():
    x = np.ones((1, 32), np.float32)
    x[0, 3] = np.inf
    for mode in ("floor", "ceil", "even"):
        codes, scales = _torchao_mx(x, mode)
        assert scales.tolist() == [[0xF7]] and codes[0, 3] == 0x7E  # X = 128 - 8; the Inf saturates to 448
    assert _torchao_mx(x, "rceil")[1].tolist() == [[0xFE]]
    assert mx.quantize(x, "float8_e4m3fn")[1].tolist() == [[0xFF]]


def test_torchao_mx_smallest_scale_divides_by_2_pow_minus_126_or_1():
    x = np.full((1, 32), 2.0 ** (8 - 127), np.float32)  # amax 2^-119: X = -127 under every rule
    x[0, 1:] *= np.linspace(0.1, 1.0, 31, dtype=np.float32)
    for mode in ("floor", "ceil", "even", "rceil"):
        codes, scales = _torchao_mx(x, mode)
        assert scales.tolist() == [[0]]
        divisor = 1.0 if mode == "rceil" else 2.0**-126
        want = encode((x.astype(np.float64) / divisor).astype(np.float32), "float8_e4m3fn", overflow="saturate")
        assert np.array_equal(codes, want), mode
        assert not np.array_equal(codes, mx.quantize(x, "float8_e4m3fn", scale_rule=mode)[0])


def test_torchao_mx_eager_rceil_is_a_step_small_just_above_a_power_of_two():
    """ceil(log2f(f32(amax / 448))): where the quotient is a few ulps above 2^k and
    |k| is large, float32's log2 returns k exactly."""
    for k in (-100, -79, 60):
        amax = np.nextafter(np.float32(448 * 2.0**k), np.float32(np.inf))
        x = np.full((1, 32), amax, np.float32)
        _, scales = _torchao_mx(x, "rceil")
        ours = mx.quantize(x, "float8_e4m3fn", scale_rule="rceil")[1]
        assert int(ours[0, 0]) == 127 + k + 1 and int(scales[0, 0]) == int(ours[0, 0]) - 1


def test_torchao_nvfp4_cannot_quantize_an_empty_tensor_but_dequantizes_one():
    """The adapter's one decline besides missing features: torchao's to_nvfp4 raises on
    an empty tensor (a view with -1), so quantize declines it; dequantize passes it on."""
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor

    from ref.conformance.adapters import torchao_nvfp4

    with pytest.raises(RuntimeError):
        NVFP4Tensor.to_nvfp4(torch.zeros(0, 16), block_size=16, per_tensor_scale=torch.tensor(1.0))
    with pytest.raises(NotImplementedError):
        torchao_nvfp4.quantize(np.zeros((0, 16), np.float32), recipe="torchao_0_17", tile_2d=False, rht=False)
    for shape in [(0, 16), (3, 0)]:
        codes, scales = np.zeros(shape, np.uint8), np.zeros((*shape[:-1], shape[-1] // 16), np.uint8)
        out = torchao_nvfp4.dequantize(codes, scales, np.float32(1), recipe="torchao_0_17", order="scale_first")
        want = nvfp4.dequantize(codes, scales, np.float32(1), recipe="torchao_0_17", order="scale_first")
        assert out.shape == want.shape == shape
