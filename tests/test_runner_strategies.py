"""Every catalogued op's example strategy and exhaustive sweep can be drawn from, under
the catalog defaults and under every variant value: a strategy that hypothesis rejects
(float bounds it cannot represent, say) would crash `conform` for every implementation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ref.conformance.catalog import discover
from ref.testing.catalog_types import Kind
from ref.testing.vector_files import Case

OPS = discover()


def _supported(op, every: bool):
    return dict(op.variant_values) if every else {v.name: (v.default,) for v in op.variants}


@pytest.mark.parametrize("every", [False, True], ids=["defaults", "every variant"])
@pytest.mark.parametrize("name", list(OPS))
def test_examples_draw_cases_the_oracle_takes(name, every):
    op = OPS[name]
    supported = _supported(op, every)

    @settings(max_examples=3, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def draw(data):
        if op.kind is Kind.STATEFUL:  # params the factory takes, then steps drawn against its state
            model = op.oracle(**data.draw(op.examples(supported)))
            for _ in range(3):
                method, args = data.draw(op.steps(model))
                assert method in op.methods and isinstance(args, dict)
            return
        case = data.draw(op.examples(supported))
        assert isinstance(case, Case)
        assert all(isinstance(np.asarray(a), np.ndarray) for a in case.inputs.values())
        for axis, value in case.params.items():
            if axis in supported:
                assert value in supported[axis], (axis, value)
        op.oracle(**case.inputs, **case.params)  # a drawn case is a valid input

    draw()


@pytest.mark.parametrize("name", [n for n, op in OPS.items() if op.exhaustive is not None])
def test_exhaustive_sweeps_yield_cases(name):
    op = OPS[name]
    cases = list(itertools.islice(op.exhaustive(_supported(op, False)), 3))
    assert cases and all(isinstance(c, Case) for c in cases)
