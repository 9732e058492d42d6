"""Rotary position embedding (RoPE), the definition: float64, one rotation per pair.

RoFormer (arXiv 2104.09864). Each head vector x [D] at integer position m has its
first r = rotary_dim dims split into r/2 pairs (a_i, b_i), i = 0..r/2-1; pair i
turns by the angle m * inv_freq[i]:

    inv_freq[i] = base^(-2i/r)                      (then rescaled, see `scaling`)
    theta_i     = m * inv_freq[i]
    a_i'        = a_i cos(theta_i) - b_i sin(theta_i)
    b_i'        = b_i cos(theta_i) + a_i sin(theta_i)
    dims r..D-1 pass through unchanged (partial rotary: GPT-NeoX, GPT-J, Phi)

so <rope(q, m), rope(k, n)> depends on q, k and n - m only.

Which dims form pair i is the `style` (`RopeStyle`, or its string value):
    "neox"  (a_i, b_i) = (x[i], x[i + r/2]), "rotate half": GPT-NeoX, Llama and
            Qwen in Hugging Face transformers, gpt-oss, vLLM's is_neox_style=True
    "gptj"  (a_i, b_i) = (x[2i], x[2i + 1]), interleaved: GPT-J, Meta's Llama
            reference code, DeepSeek-V2/V3 reference inference code

`scaling` is a Hugging Face `rope_scaling` mapping ("rope_type", or its old name
"type"): "default", "linear" (inv_freq / factor), "llama3" (Llama 3.1, arXiv
2407.21783) or "yarn" (arXiv 2309.00071, NTK-by-parts plus an attention factor);
see `rope_frequencies` for the formulas. transformers 5's `rope_parameters` also
carry "rope_theta" (the base) and "partial_rotary_factor" (rotary_dim = int(D *
factor)): both are read, and an explicit `base` or `rotary_dim` that disagrees with
them is a ValueError naming both. YaRN's attention factor multiplies cos and
sin (`attention_factor="cos_sin"`, Hugging Face, gpt-oss) or is left to the caller
(`"none"`: DeepSeek-V3 folds mscale^2 into the softmax scale instead).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import Enum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.arguments import member, real
from ref.attention.checks import floats
from ref.attention.rope_config import (
    ROPE_TYPES,
    checked_rotary_dim,
    read_scaling,
    resolve_base,
    resolve_rotary_dim,
)

__all__ = [
    "ROPE_TYPES",
    "AttentionFactor",
    "MscaleKeys",
    "RopeStyle",
    "apply_rope",
    "pair_dims",
    "prepare",
    "rope_frequencies",
    "yarn_mscale",
]


class RopeStyle(Enum):
    """Which dims form a rotated pair: rotate-half (neox) or interleaved (gptj)."""

    NEOX = "neox"
    GPTJ = "gptj"


class AttentionFactor(Enum):
    """Where YaRN's attention factor goes: into cos and sin, or left to the caller."""

    COS_SIN = "cos_sin"
    NONE = "none"


class MscaleKeys(Enum):
    """Which keys YaRN's attention factor is read from (see `rope_frequencies`)."""

    TRANSFORMERS = "transformers"
    VLLM_DEEPSEEK = "vllm_deepseek"


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature sqrt(1/t) = 0.1 * mscale * ln(factor) + 1 (1 for factor <= 1).

    DeepSeek-V2/V3 multiply the softmax scale by yarn_mscale(factor, mscale_all_dim)^2.
    """
    factor, mscale = real(factor, "factor"), real(mscale, "mscale", positive=False)
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _llama3(inv_freq, cfg):
    factor = real(cfg["factor"], "factor")
    low = real(cfg["low_freq_factor"], "low_freq_factor")
    high = real(cfg["high_freq_factor"], "high_freq_factor")
    orig = real(cfg["original_max_position_embeddings"], "original_max_position_embeddings")
    if high <= low:
        raise ValueError(f"high_freq_factor: expected more than low_freq_factor = {low}, got {high}")
    work = inv_freq.dtype.type  # python floats below are weak: the arithmetic stays in it
    wavelen = work(2 * math.pi) / inv_freq
    low_freq_wavelen, high_freq_wavelen = work(orig / low), work(orig / high)
    smooth = (work(orig) / wavelen - work(low)) / work(high - low)
    # Hugging Face's and Meta's comparisons: strict at both ends, so a wavelength equal
    # to either bound is "medium" (smooth is 0 or 1 there: the three pieces meet).
    medium = (1 - smooth) * inv_freq / work(factor) + smooth * inv_freq
    out = np.where(wavelen > low_freq_wavelen, inv_freq / work(factor), medium)
    return np.where(wavelen < high_freq_wavelen, inv_freq, out)


def _yarn(inv_freq, r, base, cfg):
    factor = real(cfg["factor"], "factor")
    orig = real(cfg["original_max_position_embeddings"], "original_max_position_embeddings")
    beta_fast = real(cfg.get("beta_fast", 32.0), "beta_fast")
    beta_slow = real(cfg.get("beta_slow", 1.0), "beta_slow")
    if beta_fast < beta_slow:
        raise ValueError(f"beta_fast: expected at least beta_slow = {beta_slow}, got {beta_fast}")
    truncate = cfg.get("truncate", True)
    if not isinstance(truncate, (bool, np.bool_)):
        raise TypeError(f"truncate: expected a bool, got {type(truncate).__name__} {truncate!r}")

    # The pair index whose wavelength makes `rotations` turns over the original context.
    def correction_dim(rotations):
        return r * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, r - 1)  # r - 1, not r/2 - 1: as Hugging Face and DeepSeek clamp
    if low == high:
        high += 0.001
    work = inv_freq.dtype.type
    ramp = np.clip((np.arange(r // 2, dtype=work) - work(low)) / work(high - low), 0, 1)  # 1: interpolate
    extrapolation = 1 - ramp
    return inv_freq / work(factor) * (1 - extrapolation) + inv_freq * extrapolation


def _yarn_attention_factor(cfg, mscale_keys: MscaleKeys) -> float:
    factor = real(cfg["factor"], "factor")
    if mscale_keys is MscaleKeys.VLLM_DEEPSEEK:  # vLLM's DeepseekScalingRotaryEmbedding: defaults 1 and 0, no attention_factor
        mscale = real(cfg.get("mscale", 1.0), "mscale", positive=False)
        mscale_all_dim = real(cfg.get("mscale_all_dim", 0.0), "mscale_all_dim", positive=False)
        return yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
    if "attention_factor" in cfg:
        return real(cfg["attention_factor"], "attention_factor")
    mscale, mscale_all_dim = cfg.get("mscale"), cfg.get("mscale_all_dim")
    if mscale and mscale_all_dim:  # both given and non-zero: DeepSeek's ratio
        return yarn_mscale(factor, mscale) / yarn_mscale(factor, real(mscale_all_dim, "mscale_all_dim"))
    return yarn_mscale(factor)


def _power(base: np.floating, exponents: NDArray) -> NDArray:
    """base ** exponents: in float64 by the C library's pow, correctly rounded in practice
    (numpy's float64 power is not, and rounds differently from one numpy version to the
    next: one ulp of inv_freq moves the angle at position 5e5 by 1e-10); in float32 by
    numpy, as an engine's float32 arithmetic does it."""
    if exponents.dtype == np.float64:
        return np.array([math.pow(base, e) for e in exponents.tolist()], np.float64)
    return base ** exponents


def rope_frequencies(
    rotary_dim: int, *, base: float | None = None, scaling: Mapping | None = None, dtype: str = "float64",
    mscale_keys: MscaleKeys | str = "transformers",
) -> tuple[NDArray[np.float64], float]:
    """inv_freq [rotary_dim // 2] and the attention factor (1.0 unless YaRN).

    `dtype` is the arithmetic: "float64" (the oracle), or "float32", every step of
    the formulas below in float32, as Hugging Face's and DeepSeek's reference code
    compute them (`base ** (arange(0, r, 2).float() / r)`, the blends in float32);
    the bounded rule's float32 yardstick uses it. Returned as float64 either way.

    inv_freq[i] = base^(-2i/r), i = 0..r/2-1, then by `scaling["rope_type"]`:

    linear   inv_freq / factor
    llama3   wavelen = 2 pi / inv_freq, L0 = original_max_position_embeddings,
             wavelen < L0 / high_freq_factor          unchanged
             wavelen > L0 / low_freq_factor           inv_freq / factor
             otherwise, smooth = (L0 / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor),
                                                      ((1 - smooth) / factor + smooth) * inv_freq
    yarn     d(n) = r ln(L0 / (2 pi n)) / (2 ln base), the pair making n turns in L0;
             low = floor(d(beta_fast)), high = ceil(d(beta_slow)) (no floor/ceil if
             truncate is False), clamped to [0, r - 1]; high += 0.001 if low == high;
             ramp_i = clip((i - low) / (high - low), 0, 1);
             inv_freq * (1 - ramp_i) + inv_freq / factor * ramp_i
             defaults beta_fast 32, beta_slow 1, truncate True.

    YaRN's attention factor, by `mscale_keys`, with mscale(s, m) = 0.1 m ln s + 1
    (1 for s <= 1), s = factor:
    "transformers"   scaling["attention_factor"] if given; else mscale(s, mscale) /
                     mscale(s, mscale_all_dim) when both are given and non-zero
                     (DeepSeek); else mscale(s, 1) (transformers 5.24
                     `_compute_yarn_parameters`)
    "vllm_deepseek"  mscale(s, mscale) / mscale(s, mscale_all_dim), defaults 1 and 0,
                     attention_factor not read (vLLM's DeepseekScalingRotaryEmbedding)
    The two agree when mscale and mscale_all_dim are both given and attention_factor
    is not (every published DeepSeek config), and when none of the three is given.

    `base` defaults to scaling["rope_theta"] (transformers 5), else 10000.
    """
    r = checked_rotary_dim(rotary_dim)
    base = resolve_base(base, scaling)
    kind, cfg = read_scaling(scaling)
    mscale_keys = member(mscale_keys, MscaleKeys, "mscale_keys")
    if dtype not in ("float64", "float32"):
        raise ValueError(f"dtype: expected 'float64' or 'float32', got {dtype!r}")
    work = np.dtype(dtype).type
    inv_freq = work(1) / _power(work(base), np.arange(0, r, 2, dtype=work) / work(r)) if r else np.zeros(0, work)
    factor = 1.0
    if kind == "linear":
        inv_freq = inv_freq / work(real(cfg["factor"], "factor"))
    elif kind == "llama3":
        inv_freq = _llama3(inv_freq, cfg)
    elif kind == "yarn":
        inv_freq, factor = _yarn(inv_freq, r, base, cfg), _yarn_attention_factor(cfg, mscale_keys)
    return inv_freq.astype(np.float64), factor


def prepare(x, positions, *, rotary_dim=None, style="neox", attention_factor="cos_sin", scaling=None):
    """Check `apply_rope`'s arguments: x as float64 [*S, H, D], positions broadcast to
    its token shape S, the rotary dim r, the style and the attention factor's place."""
    arr = floats(x, "x", np.ndim(x))  # the dtype; the rank below
    if arr.ndim < 2:
        raise ValueError(f"x: expected [*S, H, D] (at least 2 dimensions), got shape {arr.shape}")
    pos = np.asarray(positions)
    if pos.dtype.kind not in "iu":
        raise TypeError(f"positions: expected an integer array, got {pos.dtype}")
    tokens = arr.shape[:-2]
    try:
        pos = np.broadcast_to(pos, tokens)
    except ValueError:
        raise ValueError(f"positions: expected a shape broadcastable to the token shape S = {tokens} of "
                         f"x [*S, H, D] = {arr.shape}, got {pos.shape}") from None
    if pos.size and pos.min() < 0:
        raise ValueError(f"positions: expected token indices >= 0, got minimum {pos.min()}")
    r = resolve_rotary_dim(rotary_dim, arr.shape[-1], scaling)
    style = member(style, RopeStyle, "style")
    attention_factor = member(attention_factor, AttentionFactor, "attention_factor")
    return arr, pos, r, style, attention_factor


def pair_dims(r: int, style: RopeStyle | str) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """The dims of a_i and b_i for i = 0..r/2-1."""
    i = np.arange(r // 2)
    return (i, i + r // 2) if member(style, RopeStyle, "style") is RopeStyle.NEOX else (2 * i, 2 * i + 1)


def apply_rope(
    x: ArrayLike,
    positions: ArrayLike,
    *,
    rotary_dim: int | None = None,
    base: float | None = None,
    style: RopeStyle | str = "neox",
    scaling: Mapping | None = None,
    attention_factor: AttentionFactor | str = "cos_sin",
    mscale_keys: MscaleKeys | str = "transformers",
) -> NDArray[np.float64]:
    """x rotated by its positions, in float64.

    x [*S, H, D] (float16, bfloat16, float32 or float64); positions: integer token
    indices >= 0, broadcastable to S (x [B, L, H, D] with positions [B, L] or [L];
    x [T, H, D] with positions [T]). The first rotary_dim dims of each head rotate
    (default D, or int(D * scaling["partial_rotary_factor"]); even, <= D; 0 is the
    identity); the rest pass through. `base` defaults to scaling["rope_theta"], else
    10000. `mscale_keys` says which keys YaRN's attention factor is read from (see
    `rope_frequencies`). Returns
    [*S, H, D] float64. Non-finite inputs follow IEEE arithmetic of the formula: an
    Inf in a pair makes its partner NaN wherever the Inf is multiplied by sin = 0.
    """
    xf, pos, r, style, attention_factor = prepare(x, positions, rotary_dim=rotary_dim, style=style,
                                                  attention_factor=attention_factor, scaling=scaling)
    inv_freq, factor = rope_frequencies(r, base=base, scaling=scaling, mscale_keys=mscale_keys)
    theta = pos[..., None].astype(np.float64) * inv_freq  # [*S, r/2]
    cos, sin = np.cos(theta)[..., None, :], np.sin(theta)[..., None, :]  # [*S, 1, r/2]
    if attention_factor is AttentionFactor.COS_SIN:
        cos, sin = cos * factor, sin * factor
    ia, ib = pair_dims(r, style)
    a, b = xf[..., ia], xf[..., ib]  # [*S, H, r/2]
    out = xf.copy()
    with np.errstate(invalid="ignore"):
        out[..., ia] = a * cos - b * sin
        out[..., ib] = b * cos + a * sin
    return out
