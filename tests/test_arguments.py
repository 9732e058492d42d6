"""The one argument checker every oracle uses: each wrong type is a TypeError and each
wrong value a ValueError, naming the argument; right values come back normalized."""

from __future__ import annotations

import numpy as np
import pytest

from ref.arguments import boolean, choice, integer, positive_float32, real

REFUSED = [
    (lambda: integer("3", "n"), TypeError), (lambda: integer(3.0, "n"), TypeError),
    (lambda: integer(True, "n"), TypeError), (lambda: integer(np.bool_(True), "n"), TypeError),
    (lambda: integer(-1, "n", minimum=0), ValueError), (lambda: integer(9, "n", maximum=8), ValueError),
    (lambda: integer(5, "n", choices=(4, 8)), ValueError),
    (lambda: choice(1, "n", ("a", "b")), TypeError), (lambda: choice("c", "n", ("a", "b")), ValueError),
    (lambda: boolean("false", "n"), TypeError), (lambda: boolean(0, "n"), TypeError),
    (lambda: boolean(None, "n"), TypeError),
    (lambda: real("1", "n"), TypeError), (lambda: real(True, "n"), TypeError),
    (lambda: real(float("nan"), "n"), ValueError), (lambda: real(float("inf"), "n", positive=False), ValueError),
    (lambda: real(0.0, "n"), ValueError), (lambda: real(-1, "n"), ValueError),
    (lambda: positive_float32("2", "n"), TypeError), (lambda: positive_float32(False, "n"), TypeError),
    (lambda: positive_float32(np.array([1.0]), "n"), TypeError),
    (lambda: positive_float32(0.0, "n"), ValueError), (lambda: positive_float32(-2.0, "n"), ValueError),
    (lambda: positive_float32(float("nan"), "n"), ValueError),
    (lambda: positive_float32(1e39, "n"), ValueError),  # overflows float32
    (lambda: positive_float32(1e-46, "n"), ValueError),  # underflows float32 to 0
]


@pytest.mark.parametrize("call,error", REFUSED)
def test_wrong_types_and_values_are_refused_by_name(call, error):
    with pytest.raises(error, match="^n: expected"):
        call()


def test_right_values_come_back_normalized():
    assert integer(np.int64(7), "n", minimum=0, maximum=7) == 7 and type(integer(np.int8(3), "n")) is int
    assert choice("b", "n", ("a", "b")) == "b"
    assert boolean(np.bool_(True), "n") is True and boolean(False, "n") is False
    assert real(np.float32(0.5), "n") == 0.5 and real(0, "n", positive=False) == 0.0
    got = positive_float32(np.array(0.1, np.float32), "n")
    assert got.dtype == np.float32 and got == np.float32(0.1)
    assert positive_float32(0.1, "n") == np.float32(0.1) and positive_float32(3, "n") == np.float32(3)
