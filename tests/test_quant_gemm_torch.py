"""torch's own CPU quantized GEMMs (torch._scaled_mm, tinygemm's int4 kernel) through
ref.conformance.adapters.torch_quant_gemm: real kernels, other accumulation orders,
within the bounded rule with no xfails."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from ref.conformance.implementation import load_implementation  # noqa: E402
from ref.conformance.runner import parse_entries, run  # noqa: E402

ADAPTER = Path(__file__).resolve().parents[1] / "ref" / "conformance" / "adapters" / "torch_quant_gemm"


def test_torch_quantized_gemms_pass_the_bounded_rule():
    impl = load_implementation("ref.conformance.adapters.torch_quant_gemm")
    xfails = parse_entries(ADAPTER.with_suffix(".xfails").read_text())
    report = run(impl, ops=["quant.fp8_gemm", "quant.w4a16_gemm"], examples=25, shrink=False, xfails=xfails)
    assert report.ok, [(r.op, [f.where for f in r.failures]) for r in report.ops]
    assert all(r.worst < 0.5 for r in report.ops), {r.op: r.worst for r in report.ops}
