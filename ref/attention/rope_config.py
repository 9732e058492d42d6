"""Reading a RoPE scaling configuration as engines write it: Hugging Face's
`rope_scaling` (its "rope_type", or the old name "type", and each type's keys) and
transformers 5's `rope_parameters`, which also carry "rope_theta" (the base) and
"partial_rotary_factor". Every key given is checked, read or not, and an explicit
`base` or `rotary_dim` that disagrees with the mapping is a ValueError naming both:
no silent fallbacks. The formulas that use the keys are in `ref.attention.rope`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ref.arguments import real

__all__ = ["DEFAULT_BASE", "ROPE_TYPES", "checked_rotary_dim", "read_common", "read_scaling", "resolve_base",
           "resolve_rotary_dim"]

ROPE_TYPES = ("default", "linear", "llama3", "yarn")
DEFAULT_BASE = 10000.0


# rope_scaling keys per rope_type: (required, optional); "rope_type"/"type" and the
# keys every type may carry (transformers 5's rope_parameters) not listed.
_COMMON = ("rope_theta", "partial_rotary_factor")
_MSCALES = ("mscale", "mscale_all_dim")
_KEYS = {
    "default": ((), ()),
    "linear": (("factor",), ()),
    "llama3": (("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"), ()),
    "yarn": (("factor", "original_max_position_embeddings"),
             ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "truncate")),
}


def checked_rotary_dim(rotary_dim, d: int | None = None) -> int:
    if isinstance(rotary_dim, (bool, np.bool_)) or not isinstance(rotary_dim, (int, np.integer)):
        raise TypeError(f"rotary_dim: expected an integer, got {type(rotary_dim).__name__} {rotary_dim!r}")
    r = int(rotary_dim)
    if r < 0 or r % 2:
        raise ValueError(f"rotary_dim: expected an even integer >= 0, got {r}")
    if d is not None and r > d:
        raise ValueError(f"rotary_dim: expected at most the head dim D = {d}, got {r}")
    return r


def read_scaling(scaling) -> tuple[str, dict]:
    """The rope_type and the checked keys of a rope_scaling mapping (the common keys
    rope_theta and partial_rotary_factor removed: see `read_common`)."""
    if scaling is None:
        return "default", {}
    if not isinstance(scaling, Mapping):
        raise TypeError(f"scaling: expected a Hugging Face rope_scaling mapping or None, got {type(scaling).__name__}")
    cfg = {key: value for key, value in scaling.items() if value is not None and key not in _COMMON}  # None: absent
    kind = cfg.pop("rope_type", None)
    old = cfg.pop("type", None)
    if kind is not None and old is not None and kind != old:
        raise ValueError(f"rope_type: scaling gives rope_type {kind!r} and its old name type {old!r}")
    kind = kind if kind is not None else old
    if not isinstance(kind, str) or kind not in ROPE_TYPES:
        raise ValueError(f"rope_type: expected one of {ROPE_TYPES}, got {kind!r}")
    required, optional = _KEYS[kind]
    for key in required:
        if key not in cfg:
            raise ValueError(f"{key}: rope_type {kind!r} needs scaling[{key!r}], got {sorted(scaling)}")
    unknown = sorted(set(cfg) - set(required) - set(optional))
    if unknown:
        raise ValueError(f"{unknown[0]}: not a key of rope_type {kind!r}; expected {required + optional}")
    for key, value in cfg.items():  # every key checked, read or not: no silent fallbacks
        if key == "truncate":
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"truncate: expected a bool, got {type(value).__name__} {value!r}")
        elif key in _MSCALES:  # 0 means absent, as in transformers
            if real(value, key, positive=False) < 0:
                raise ValueError(f"{key}: expected a number >= 0, got {value}")
        else:
            real(value, key)
    return kind, cfg


def read_common(scaling) -> dict:
    """rope_theta and partial_rotary_factor of a transformers 5 rope_parameters mapping, checked."""
    if not isinstance(scaling, Mapping):
        return {}
    out = {}
    if scaling.get("rope_theta") is not None:
        out["rope_theta"] = real(scaling["rope_theta"], "rope_theta")
        if out["rope_theta"] <= 1:
            raise ValueError(f"rope_theta: expected a number > 1, got {out['rope_theta']}")
    if scaling.get("partial_rotary_factor") is not None:
        factor = real(scaling["partial_rotary_factor"], "partial_rotary_factor")
        if factor > 1:
            raise ValueError(f"partial_rotary_factor: expected a fraction in (0, 1], got {factor}")
        out["partial_rotary_factor"] = factor
    return out


def resolve_base(base, scaling) -> float:
    """The RoPE base: `base`, else scaling["rope_theta"], else 10000; the two must agree."""
    theta = read_common(scaling).get("rope_theta")
    if base is None:
        return DEFAULT_BASE if theta is None else theta
    base = real(base, "base")
    if base <= 1:
        raise ValueError(f"base: expected a number > 1, got {base}")
    if theta is not None and theta != base:
        raise ValueError(f"base, rope_theta: base = {base} and scaling['rope_theta'] = {theta} disagree")
    return base


def resolve_rotary_dim(rotary_dim, d: int, scaling) -> int:
    """rotary_dim, else int(D * partial_rotary_factor) (transformers 5), else D; the
    explicit and the implied one must agree."""
    fraction = read_common(scaling).get("partial_rotary_factor")
    implied = None if fraction is None else int(d * fraction)
    if rotary_dim is None:
        r = d if implied is None else implied
        if r % 2:
            what = "the head dim D" if implied is None else f"int(D * partial_rotary_factor) = int({d} * {fraction})"
            raise ValueError(f"rotary_dim: the default is {what} = {r}, which is odd; pass an even rotary_dim")
        return r
    r = checked_rotary_dim(rotary_dim, d)
    if implied is not None and implied != r:
        raise ValueError(f"rotary_dim, partial_rotary_factor: rotary_dim = {r} but int(D * partial_rotary_factor) "
                         f"= int({d} * {fraction}) = {implied}")
    return r
