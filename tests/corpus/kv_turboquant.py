"""The TurboQuant bug corpus: wrong kernels written the way TurboQuant ports go wrong,
each one step changed from the default kernel (ref.conformance.adapters.numpy_kv_turboquant).

TURBOQUANT_BUGS: name -> (op, flag, kernel). `bug(name)` is the Implementation of that one op.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from corpus import patched
from ref.conformance.adapters import numpy_kv_turboquant as K
from ref.conformance.implementation import Implementation
from ref.quant import lloyd_max
from ref.testing.flags import INVALID_INPUT

CB, QM, DM = "kv.turboquant.codebook", "kv.turboquant.quantize_mse", "kv.turboquant.dequantize_mse"
QP, EP = "kv.turboquant.quantize_prod", "kv.turboquant.estimate_prod"
DP = "kv.turboquant.dequantize_prod"


def _gaussian(variance_one: bool):
    """The Gaussian Lloyd-Max codebook, of N(0, 1) or of N(0, 1/d), for the sphere coordinate's."""
    def replacement(original):
        def levels_for(bits, dim):
            if bits == 0:
                return np.zeros(1), np.zeros(0)
            c, t, _ = lloyd_max.codebook(bits)
            s = 1.0 if variance_one else 1 / np.sqrt(dim)
            return c * s, t * s
        return levels_for
    return replacement


def _quantile_thresholds(original):
    """The right levels, but thresholds at the equal-mass quantiles i / 2^b, not midpoints."""
    def levels_for(bits, dim):
        c, t = original(bits, dim)
        n = 1 << bits
        a = (dim - 1) / 2
        return c, 2 * stats.beta.ppf(np.arange(1, n) / n, a, a) - 1
    return levels_for


def _tie_up(original):
    return lambda y, t: np.sum(y[..., None] >= t, axis=-1).astype(np.int64)


def _encode_with_transpose(original):
    return lambda x, r: x @ r  # Pi^T x on encode (decode stays Pi^T y)


def _decode_not_inverted(original):
    return lambda y, r: y @ r.T  # Pi y on decode


def _dequantize_unit(codes, norms, rotation, *, bits=2):
    return K.dequantize_mse(codes, np.ones_like(np.asarray(norms, np.float64)), rotation, bits=bits)


def _estimate(change_gamma):
    def kernel(q, codes, norms, signs, residual_norms, rotation, projection, *, bits=3):
        return K.estimate_prod(q, codes, norms, signs, change_gamma(np.asarray(residual_norms), np.asarray(norms)),
                               rotation, projection, bits=bits)
    return kernel


def _float_kept(original):
    def as_float(x, name, min_ndim=1):
        out = original(x, name, min_ndim)
        return out.astype(np.asarray(x).dtype) if np.asarray(x).dtype == np.float32 else out
    return as_float


def _eps_unit(eps, clamp):
    """y = Pi x / (rho + eps) or / max(rho, eps): a torch port's guard against 0/0."""
    def replacement(original):
        return lambda px, norms: px / (np.maximum(norms, eps) if clamp else norms + eps)[..., None]
    return replacement


def _rounded(dtype):
    """An intermediate rounded to float32 or float16 before it is used."""
    def replacement(original):
        return lambda *args: original(*(np.asarray(a).astype(dtype).astype(np.float64) for a in args))
    return replacement


def _rounded_first(dtype):
    """Only the first argument (the coordinates y, the residual r, the queries q) rounded."""
    def replacement(original):
        return lambda v, *rest: original(np.asarray(v).astype(dtype).astype(np.float64), *rest)
    return replacement


def _rounded_thresholds(original):
    return lambda y, t: original(y, np.asarray(t).astype(np.float32).astype(np.float64))


def _float_signs_accepted(q, codes, norms, signs, residual_norms, rotation, projection, *, bits=3):
    z = np.asarray(signs)
    z = z.astype(np.int8) if z.dtype.kind == "f" else z  # float signs converted instead of refused
    return K.estimate_prod(q, codes, norms, z, residual_norms, rotation, projection, bits=bits)


def _width_only(original):
    def projection(p, d):
        s = np.asarray(p, np.float64)
        if s.ndim != 2 or s.shape[1] != d:
            raise ValueError("projection: expected [m, d]")  # m = 0 let through
        return s
    return projection


def _constant(value):
    return lambda original: (lambda *args: value(*args))


TURBOQUANT_BUGS = {
    # the list
    "Lloyd-Max codebook of N(0, 1) (variance 1, not 1/d)": (QM, "SphereDensity", patched(
        K.quantize_mse, K, "levels_for", _gaussian(True))),
    "Lloyd-Max codebook of N(0, 1), codebook op": (CB, "SphereDensity", patched(
        K.codebook, K, "levels_for", _gaussian(True))),
    "the Gaussian limit N(0, 1/d) for the sphere coordinate": (CB, "SphereDensity", patched(
        K.codebook, K, "levels_for", _gaussian(False))),
    "the Gaussian limit N(0, 1/d) in the encoder": (QM, "SphereDensity", patched(
        K.quantize_mse, K, "levels_for", _gaussian(False))),
    "boundaries at equal-mass quantiles, not midpoints": (CB, "Midpoints", patched(
        K.codebook, K, "levels_for", _quantile_thresholds)),
    "encoder with quantile boundaries": (QM, "Midpoints", patched(K.quantize_mse, K, "levels_for",
                                                                  _quantile_thresholds)),
    "rotation applied as Pi^T on encode (and Pi^T on decode)": (QM, "RotationInverse", patched(
        K.quantize_mse, K, "rotate", _encode_with_transpose)),
    "rotation not inverted on decode": (DM, "RotationInverse", patched(K.dequantize_mse, K, "unrotate",
                                                                       _decode_not_inverted)),
    "the MSE variant's scores where prod's unbiased ones are defined": (EP, "BiasedScores", patched(
        K.estimate_prod, K, "qjl_scale", _constant(lambda m, d: 0.0))),
    "residual norm dropped (gamma = 1)": (EP, "NormKept", _estimate(lambda gamma, rho: np.ones_like(gamma))),
    "residual norm replaced by the key's norm": (EP, "NormKept", _estimate(lambda gamma, rho: rho)),
    "b bits for prod's MSE part instead of b - 1": (QP, "ProdBits", patched(
        K.quantize_prod, K, "mse_bits", _constant(lambda bits: bits))),
    # further plausible slips
    "a tie at a threshold sent to the upper level": (QM, "CodeTie", patched(K.quantize_mse, K, "nearest",
                                                                            _tie_up)),
    "norm not applied on decode (the unit-vector form)": (DM, "NormKept", _dequantize_unit),
    "QJL term scaled by 1/d instead of 1/m": (EP, "SketchScale", patched(
        K.estimate_prod, K, "qjl_scale", _constant(lambda m, d: np.sqrt(np.pi / 2) / d))),
    "decoder's QJL term without sqrt(pi/2)": (DP, "SketchScale", patched(
        K.dequantize_prod, K, "qjl_scale", _constant(lambda m, d: 1.0 / m))),
    "decoder's QJL term scaled by 1/d": (DP, "SketchScale", patched(
        K.dequantize_prod, K, "qjl_scale", _constant(lambda m, d: np.sqrt(np.pi / 2) / d))),
    "decoder reads b bits for the MSE part": (DP, "ProdBits", patched(
        K.dequantize_prod, K, "mse_bits", _constant(lambda bits: bits))),
    "QJL term without sqrt(pi/2)": (EP, "SketchScale", patched(
        K.estimate_prod, K, "qjl_scale", _constant(lambda m, d: 1.0 / m))),
    "sign(0) = 0 (numpy's sign)": (QP, "SignOfZero", patched(
        K.quantize_prod, K, "sign_bits", _constant(lambda v: np.sign(v).astype(np.int8)))),
    "sign(0) = +1 (S r >= 0)": (QP, "SignOfZero", patched(
        K.quantize_prod, K, "sign_bits", _constant(lambda v: np.where(v >= 0, 1, -1).astype(np.int8)))),
    "query head h reads cache head h % H": (EP, "GqaHeads", patched(
        K.estimate_prod, K, "head_of", _constant(lambda hq, g, h: hq % h))),
    "float32 keys computed in float32": (QM, "InputDtype", patched(K.quantize_mse, K, "_float", _float_kept)),
    # issue 15's adversary: bugs that only tiny, near-threshold, full-mantissa or g != H inputs show
    "y = Pi x / (rho + 1e-8)": (QM, "TinyNorm", patched(K.quantize_mse, K, "unit_coordinates",
                                                      _eps_unit(1e-8, False))),
    "y = Pi x / max(rho, 1e-12) (F.normalize)": (QM, "TinyNorm", patched(K.quantize_mse, K, "unit_coordinates",
                                                                       _eps_unit(1e-12, True))),
    "prod's encoder with y = Pi x / max(rho, 1e-6)": (QP, "TinyNorm", patched(K.quantize_prod, K, "unit_coordinates",
                                                                            _eps_unit(1e-6, True))),
    "residual sign as S r > 1e-12": (QP, "TinyNorm", patched(
        K.quantize_prod, K, "sign_bits", _constant(lambda v: np.where(v > 1e-12, 1, -1).astype(np.int8)))),
    "rotated unit coordinates compared in float32": (QM, "Float64Compute", patched(
        K.quantize_mse, K, "nearest", _rounded_first(np.float32))),
    "rotated unit coordinates stored in float16": (QM, "Float64Compute", patched(
        K.quantize_mse, K, "nearest", _rounded_first(np.float16))),
    "thresholds kept in float32": (QM, "Float64Compute", patched(K.quantize_mse, K, "nearest",
                                                                 _rounded_thresholds)),
    "the sketch S r in float32": (QP, "Float64Compute", patched(K.quantize_prod, K, "sketch",
                                                                _rounded(np.float32))),
    "the query sketch S q in float32": (EP, "Float64Compute", patched(K.estimate_prod, K, "sketch",
                                                                      _rounded(np.float32))),
    "queries rounded to float16": (EP, "Float64Compute", patched(K.estimate_prod, K, "sketch",
                                                                 _rounded_first(np.float16))),
    "query head h reads cache head h // H": (EP, "GqaHeads", patched(
        K.estimate_prod, K, "head_of", _constant(lambda hq, g, h: hq // h))),
    "float signs accepted": (EP, INVALID_INPUT, _float_signs_accepted),
    "an empty projection (m = 0) accepted": (QP, INVALID_INPUT, patched(K.quantize_prod, K, "_projection",
                                                                       _width_only)),
}


# Run by a plain `pytest` (tests/test_runner_corpus_rule.py): the issue's own entry (about 1 s with the
# kernel's codebooks built the first time); the rest are `deep` (0.1-1.5 s each).
DEFAULT_PROFILE = ("the MSE variant's scores where prod's unbiased ones are defined",)


def bug(name: str) -> Implementation:
    op, _, kernel = TURBOQUANT_BUGS[name]
    return Implementation(f"bug: {name}", {op: kernel}, variants={op: K.VARIANTS[op]})
