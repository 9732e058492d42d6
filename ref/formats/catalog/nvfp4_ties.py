"""Searches for NVFP4 inputs where the recipes' float32 orders part ways: block maxima
whose E4M3 scale differs between two recipes, or lies within a few ulps of an E4M3
tie, and elements whose scaled value lies near an E2M1 tie. Each search runs the
definition's own public steps (`nvfp4.tensor_scale`, `nvfp4.block_scales`), so a
vector is a tie of the oracle, not of a copy of it."""

from __future__ import annotations

import numpy as np

from ref.formats import nvfp4
from ref.formats.minifloat import encode
from ref.testing.strategies import representable_values

__all__ = ["at_scale_ties", "element_ties", "recipe_ties", "torchao_order_ties"]

Recipe = nvfp4.Recipe
E2M1_TIES = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], np.float32)


def _divides(recipe: Recipe) -> bool:
    """torchao up to 0.16 divides the elements by f32(p * sb); the others multiply."""
    return recipe is Recipe.TORCHAO_0_13


def _torchao(recipe: Recipe) -> bool:
    return recipe in (Recipe.TORCHAO_0_13, Recipe.TORCHAO_0_17)


def _neighbours(centre: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """float32 values `steps` ulps from each of `centre` (by their bit patterns)."""
    return (centre.astype(np.float32).view(np.int32)[..., None] + steps).astype(np.int32).view(np.float32)


def recipe_ties(recipe_a: str, recipe_b: str, amax: float, count: int = 32) -> np.ndarray:
    """Block maxima where two recipes' float32 orders pick different E4M3 scales
    (searched among float32 neighbours of each E4M3 tie times 6/g)."""
    g = {r: nvfp4.tensor_scale(np.float32(amax), r) for r in (recipe_a, recipe_b)}
    e4 = representable_values("float8_e4m3fn")
    e4 = e4[e4 > 0.01]
    ties = (e4[:-1] + e4[1:]) / 2
    found = []
    g_te = float(nvfp4.tensor_scale(np.float32(amax), Recipe.TRANSFORMER_ENGINE))
    for t in ties[::3]:
        cand = _neighbours(np.float32(t * 6 / g_te), np.arange(-64, 65))
        cand = cand[(cand > 0) & (cand < amax)]
        sa, _ = nvfp4.block_scales(cand, g[recipe_a], recipe_a)
        sb, _ = nvfp4.block_scales(cand, g[recipe_b], recipe_b)
        found.extend(cand[sa != sb][:2])
        if len(found) >= count:
            break
    return np.array(found[:count], dtype=np.float32)


def at_scale_ties(recipe: Recipe, amax: float, count: int = 40) -> np.ndarray:
    """Block maxima whose float32 block-scale value, in this recipe's order, lies
    within 2 ulps of an E4M3 tie: any other order or rounding of the intermediates
    lands some of them on the other side."""
    g = nvfp4.tensor_scale(np.float32(amax), recipe)
    e4 = representable_values("float8_e4m3fn")
    e4 = e4[(e4 > 0.01) & (e4 < 448)]
    ties = ((e4[:-1] + e4[1:]) / 2)[::2].astype(np.float32)
    per_unit = float(g) / 6 if not _torchao(recipe) else 1 / (6 * float(g))
    cand = _neighbours((ties / per_unit).astype(np.float32), np.arange(-6, 7))
    with np.errstate(all="ignore"):  # the block-scale value before its E4M3 rounding, as block_scales has it
        if recipe is Recipe.TRANSFORMER_ENGINE:
            value = cand * (g * np.float32(1 / 6))
        elif recipe is Recipe.VLLM:
            value = g * (cand * np.float32(1 / 6))
        else:
            value = (cand / np.float32(6)) / g
    ulp = np.spacing(ties)[:, None]
    near = (np.abs(value - ties[:, None]) <= 2 * ulp) & (cand > 0) & (cand < amax)
    return cand[near][:count].astype(np.float32)


def element_ties(recipe: Recipe, amax: float, rng) -> np.ndarray:
    """Rows [block max, 15 elements] where each element, scaled in the recipe's order
    (x * r, or x / d for torchao 0.13), lands within 2 float32 ulps of an E2M1 tie: a
    reciprocal where the recipe divides (or the reverse) flips some of them."""
    g = nvfp4.tensor_scale(np.float32(amax), recipe)
    rows = [np.array([amax] + [0.0] * 15, np.float32)]
    div = _divides(recipe)
    for bamax in rng.uniform(1.0, 90.0, 12).astype(np.float32):
        _, m = nvfp4.block_scales(np.array([bamax], np.float32), g, recipe)
        m = m[0]
        centre = (E2M1_TIES * m if div else E2M1_TIES / m).astype(np.float32)
        cand = _neighbours(centre, np.arange(-3, 4)).ravel()
        with np.errstate(all="ignore"):
            scaled = cand / m if div else cand * m
        near = np.abs(scaled - np.repeat(E2M1_TIES, 7)) <= 2 * np.spacing(np.repeat(E2M1_TIES, 7))
        pick = cand[near & (cand < bamax)]
        if pick.size:
            row = np.zeros(16, np.float32)
            row[0] = bamax
            row[1:] = np.resize(pick, 15) * rng.choice([-1, 1], 15).astype(np.float32)
            rows.append(row)
    return np.stack(rows)


def torchao_order_ties(amax: np.float32, rng, count: int = 12) -> np.ndarray:
    """Rows [global amax, 0...] then [block max, 15 elements] where torchao 0.13's
    division and 0.17's reciprocal product give different E2M1 codes."""
    old, new = Recipe.TORCHAO_0_13, Recipe.TORCHAO_0_17
    p = nvfp4.tensor_scale(amax, new)
    rows = [np.array([amax] + [0.0] * 15, np.float32)]
    for bamax in rng.uniform(0.05, 0.95, 64).astype(np.float32) * amax:
        _, d = nvfp4.block_scales(np.array([bamax], np.float32), p, old)
        _, m = nvfp4.block_scales(np.array([bamax], np.float32), p, new)
        cand = _neighbours((E2M1_TIES * d[0]).astype(np.float32), np.arange(-4, 5)).ravel()
        cand = cand[(cand > 0) & (cand < bamax)]
        with np.errstate(all="ignore"):
            differ = encode(cand / d[0], "float4_e2m1fn") != encode(cand * m[0], "float4_e2m1fn")
        if differ.any():
            row = np.zeros(16, np.float32)
            row[0] = bamax
            row[1:] = np.resize(cand[differ], 15) * rng.choice([-1, 1], 15).astype(np.float32)
            rows.append(row)
        if len(rows) > count:
            break
    return np.stack(rows)
