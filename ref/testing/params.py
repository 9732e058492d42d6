"""Drawing a case's variant parameters: an op's `examples(supported)` strategy gets,
per axis, the values an implementation supports (the catalog default where it
declares none), and draws one value of each."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hypothesis import strategies as st

from ref.testing.catalog_types import VariantValue

__all__ = ["variant_params"]


@st.composite
def variant_params(draw, supported: Mapping[str, Sequence[VariantValue]], *,
                   only: Sequence[str] | None = None) -> dict[str, VariantValue]:
    """One value per axis of `supported` (axis -> the values to choose from), in the
    order the axes are listed, each draw labelled with its axis; `only` restricts the
    draw to those axes (an axis the strategy pins itself is left out)."""
    axes = [a for a in supported if only is None or a in only]
    unknown = sorted(set(only or ()) - set(supported))
    if unknown:
        raise ValueError(f"only: {unknown} are not among the supported axes {list(supported)}")
    params = {}
    for axis in axes:
        values = list(supported[axis])
        if not values:
            raise ValueError(f"supported: axis {axis!r} has no value to draw")
        params[axis] = draw(st.sampled_from(values), label=axis)
    return params
