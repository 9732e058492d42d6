"""The statistical kind on its real op, formats.<fmt>.encode_stochastic_rng: the
distribution oracle against the exact explicit-bits oracle (every k enumerated), the
goodness-of-fit machinery on its own, the judge's handling of what candidates do,
every corpus bug rejected and the correct samplers accepted. Under
HYPOTHESIS_PROFILE=deep: the power against each bug and the false-alarm rate,
measured (spec/conformance.md, "Statistical operations")."""

from __future__ import annotations

import dataclasses
import math
import os
from types import SimpleNamespace

import numpy as np
import pytest
from corpus import stochastic as cs
from scipy import stats

from ref.conformance.judges.statistical import RERUN_NOTE, run_op
from ref.conformance.report import Entry, OpReport
from ref.formats.catalog.stochastic_rng import OPERATIONS, same_code
from ref.formats.minifloat import get_format
from ref.formats.stochastic import encode_stochastic
from ref.formats.sr_distribution import SR_FORMATS, sr_distribution, step_probability
from ref.conformance.regenerate import build_vectors
from ref.testing.statistical import (StatisticalOp, binomial_pvalue, check_level, classes, dispersion_pvalue, fit,
                                     multinomial_pvalue, neighbour_groups, seeds)

OPS = {op.name.split(".")[1]: op for op in OPERATIONS}
DEEP = os.environ.get("HYPOTHESIS_PROFILE") == "deep"
_VECTORS: dict[str, list] = {}


def vectors(op):
    if op.name not in _VECTORS:
        _VECTORS[op.name] = build_vectors(op)
    return _VECTORS[op.name]


def judge(op, sampler, variants=None, *, examples=5, seed_base=None, skips=(), xfails=(), with_vectors=True,
          stop_at_failure=False):
    impl = cs.implementation(op, sampler, variants)
    report = OpReport(op.name, op.kind.value, op.spec)
    settings = SimpleNamespace(examples=examples, skips=tuple(skips), xfails=tuple(xfails), golden=None,
                               shrink=False, large=False)
    run_op(op, impl.fn, impl, settings, report, seed_base=seed_base, vectors=vectors(op) if with_vectors else [],
           stop_at_failure=stop_at_failure)
    return report


# --- the distribution oracle -------------------------------------------------------------------------------


def _inputs(f, dtype, rng):
    m = f.max_normal
    with np.errstate(over="ignore"):
        return np.concatenate([rng.uniform(-1.2 * m, 1.2 * m, 200), rng.standard_normal(100) * f.min_normal * 4,
                               [0.0, -0.0, np.inf, -np.inf, np.nan, m, -m, 3 * m]]).astype(dtype)


@pytest.mark.parametrize("fmt", SR_FORMATS)
def test_distribution_counts_every_random_value_of_the_exact_oracle(fmt):
    """For W random bits, P(away) is the share of the 2^W values of k for which the
    exact oracle (encode_stochastic with rbits = k << (32 - W)) steps away; both outcomes are
    codes the exact oracle gives."""
    f, rng = get_format(fmt), np.random.default_rng(7)
    for dtype in (np.float16, np.float32, np.float64):
        if f.mbits > np.finfo(dtype).nmant:
            continue
        x = _inputs(f, dtype, rng)
        for w in (1, 3, 6):
            for overflow in f.overflow_policies():
                outcomes, p = sr_distribution(x, fmt, sr_bits=w, overflow=overflow)
                away = np.zeros(x.shape)
                for k in range(1 << w):
                    rbits = np.full(x.shape, k << (32 - w), dtype=np.uint32)
                    got = encode_stochastic(x, fmt, rbits, sr_bits=w, overflow=overflow)
                    down, up = same_code(got, outcomes[..., 0], fmt), same_code(got, outcomes[..., 1], fmt)
                    assert np.all(down | up), (dtype, w, overflow, x[~(down | up)])
                    away += up & ~down
                np.testing.assert_array_equal(away / (1 << w), p[..., 1], err_msg=f"{dtype} W={w} {overflow}")


def test_wide_random_bits_and_float64_fractions():
    """At W = 8, 13, 16 the probability is the fraction truncated to W bits, from a
    float64 input whose fraction has bits far below W (checked against encode_stochastic at the
    carry boundary k = 2^W - floor(f 2^W), and one below)."""
    for fmt in ("float8_e4m3fn", "float16", "bfloat16"):
        x = np.float64(1.0) + np.ldexp(np.arange(1, 200, dtype=np.float64) * 0.37 + 0.5, -20)
        for w in (8, 13, 16):
            outcomes, p = sr_distribution(x, fmt, sr_bits=w)
            count = np.round(p[..., 1] * (1 << w)).astype(np.int64)
            for k, steps in ((1 << w) - count, True), ((1 << w) - count - 1, False):
                ok = (k >= 0) & (k < (1 << w)) & (count > 0)
                rbits = (np.clip(k, 0, (1 << w) - 1).astype(np.uint64) << (32 - w)).astype(np.uint32)
                got = encode_stochastic(x, fmt, rbits, sr_bits=w)
                want = outcomes[..., 1] if steps else outcomes[..., 0]
                np.testing.assert_array_equal(got[ok], want[ok])


def test_step_probability_and_edge_cases():
    assert step_probability([0.0, 0.5, 2.0**-9, 2.0**-8, 1 - 2.0**-40], 8).tolist() == [0, 0.5, 0, 2.0**-8,
                                                                                        255 / 256]
    outcomes, p = sr_distribution(np.float32([2.5, -2.5, 2.0, 7.0, np.nan]), "float4_e2m1fn")
    assert outcomes.tolist() == [[4, 5], [12, 13], [4, 5], [7, 7], [7, 7]]  # 2 = 0b0100; 7.0 saturates to 6
    assert p[..., 1].tolist() == [0.5, 0.5, 0.0, 0.0, 0.0]
    o, p = sr_distribution(np.float32([-1e-30, 500.0, np.inf]), "float8_e4m3fnuz", overflow="nonsaturating")
    assert o[0].tolist() == [0, 0x80 | 1] and p[0, 1] == 0.0  # no -0 in FNUZ: 0x80 is NaN
    assert o[1, 1] == 0x80 and o[2].tolist() == [0x80, 0x80]
    o, p = sr_distribution(np.float32([65520.0]), "float16")  # max 65504 + 16/32 ulp: overflow to Inf w.p. 1/2
    assert o.tolist() == [[0x7BFF, 0x7C00]] and p.tolist() == [[0.5, 0.5]]
    assert sr_distribution(np.zeros((0, 3), np.float32), "bfloat16")[0].shape == (0, 3, 2)


@pytest.mark.parametrize("bad, error", [
    (dict(x=np.ones(3, np.int32)), TypeError), (dict(x=np.ones(3, np.uint16)), TypeError),
    (dict(sr_bits=0), ValueError), (dict(sr_bits=33), ValueError), (dict(sr_bits=True), TypeError),
    (dict(overflow="nonsaturating", fmt="float4_e2m1fn"), ValueError), (dict(overflow="wrap"), ValueError),
    (dict(fmt="float8_e8m0fnu"), ValueError), (dict(x=np.ones(3, np.float16), fmt="float16", sr_bits=8), None),
])
def test_distribution_rejects_bad_arguments(bad, error):
    kwargs = {"x": np.ones(3, np.float32), "fmt": "float8_e4m3fn", **bad}
    if error is None:
        sr_distribution(**kwargs)
        return
    with pytest.raises(error, match=[k for k in bad if k != "fmt"][0] if len(bad) > 1 or "fmt" not in bad
                       else "fmt"):
        sr_distribution(**kwargs)


# --- the goodness-of-fit machinery ---------------------------------------------------------------------------


def test_binomial_and_multinomial_pvalues():
    assert binomial_pvalue(0, 10, 0.5) == pytest.approx(2 * 0.5**10)
    assert binomial_pvalue(5, 10, 0.5) == pytest.approx(1.0)
    assert binomial_pvalue(0, 10, 0.0) == 1.0 and binomial_pvalue(1, 10, 0.0) == 0.0
    assert binomial_pvalue(3, 0, 0.3) == 1.0
    counts, p = [30, 50, 20], [0.3, 0.5, 0.2]
    assert multinomial_pvalue(counts, p) == pytest.approx(stats.chisquare(counts, [30, 50, 20]).pvalue)
    assert multinomial_pvalue([70, 30, 0], [0.7, 0.3, 0.0]) == pytest.approx(binomial_pvalue(30, 100, 0.3))
    assert multinomial_pvalue([70, 29, 1], [0.7, 0.3, 0.0]) == 0.0  # an impossible outcome
    small = multinomial_pvalue([9, 0, 1], [0.8, 0.1, 0.1])  # expected counts below 5: Bonferroni-split binomials
    assert small == pytest.approx(min(1.0, 3 * min(binomial_pvalue(9, 10, 0.8), binomial_pvalue(0, 10, 0.1),
                                                   binomial_pvalue(1, 10, 0.1))))


def test_binomial_pvalue_is_scipys_binomtest():
    rng = np.random.default_rng(3)
    for n in [*rng.integers(1, 5000, 150), 4096, 4097, 20000]:
        p = float(rng.choice([0.5, 0.25, 1 / 256, 2.0**-32, 1 - 1 / 256, rng.random()]))
        k = int(rng.binomial(n, p)) if rng.random() < 0.7 else int(rng.integers(0, n + 1))
        assert binomial_pvalue(k, int(n), p) == pytest.approx(stats.binomtest(k, int(n), p).pvalue, rel=1e-9,
                                                              abs=1e-300)


def test_level_split_and_seeds():
    assert check_level(1e-6, 100) == pytest.approx(1e-4)  # confirmed by a re-run: 1e-4^2 per check
    a = seeds(5, 3, 0, 64)
    assert len(set(a)) == 64 and a == seeds(5, 3, 0, 64) and not set(a) & set(seeds(5, 3, 1, 64))
    assert all(0 <= s < 2**32 for s in a)


def _draw(probabilities, outcomes, calls, rng):
    u = rng.random((calls, *probabilities.shape[:-1]))
    index = (u[..., None] >= np.cumsum(probabilities, -1)).sum(-1).clip(0, probabilities.shape[-1] - 1)
    return np.take_along_axis(np.broadcast_to(outcomes, (calls, *outcomes.shape)), index[..., None], -1)[..., 0]


def test_fit_finds_strays_classes_and_repeats():
    outcomes = np.array([[0, 1]] * 100 + [[5, 6]] * 100 + [[9, 9]] * 10, dtype=np.uint8)
    p = np.array([[0.75, 0.25]] * 200 + [[1.0, 0.0]] * 10)
    rows, label = classes(p)
    assert rows.tolist() == [[0.75, 0.25], [1.0, 0.0]] and np.bincount(label).tolist() == [200, 10]
    rng = np.random.default_rng(1)
    good = _draw(p, outcomes, 64, rng)
    assert fit(outcomes, p, good, 1e-3).ok
    stray = good.copy()
    stray[7, 150] = 7
    bad = fit(outcomes, p, stray, 1e-3)
    assert not bad.ok and bad.deterministic and "call 8: element (150,) is 7" in bad.detail
    biased = _draw(np.array([[0.7, 0.3]] * 200 + [[1.0, 0.0]] * 10), outcomes, 64, rng)
    result = fit(outcomes, p, biased, 1e-3)
    assert not result.ok and not result.deterministic and "class P = (0.75, 0.25)" in result.detail
    assert "the first at index (0,)" in result.detail and "counts (" in result.detail  # outcomes differ by element
    tokens = np.array([[0, 1, -1]] * 4)  # every element the same outcomes: counts shown by value
    skewed = fit(tokens, np.array([[0.5, 0.25, 0.25]] * 4), np.full((64, 4), -1), 1e-3)
    assert "outcome: count vs expected {0: 0 vs 128, 1: 0 vs 64, -1: 256 vs 64}" in skewed.detail
    same = np.broadcast_to(good[0], good.shape)
    assert "same values" in fit(outcomes, p, same, 1e-3).detail
    # an outcome repeated within an element counts once, with both probabilities
    dup = np.array([[3, 3, 4]] * 50, dtype=np.uint8)
    assert fit(dup, np.array([[0.25, 0.25, 0.5]] * 50), _draw(np.array([[0.5, 0.5]] * 50), dup[:, 1:], 64, rng),
               1e-3).ok
    nan_codes = np.array([[0x7F, 0x7F]], dtype=np.uint8)  # E4M3FN NaN: 0xFF is NaN too
    assert fit(nan_codes, np.array([[1.0, 0.0]]), np.full((4, 1), 0xFF, np.uint8), 1e-3,
               lambda a, b: same_code(a, b, "float8_e4m3fn")).ok


def test_the_exact_binomial_test_holds_its_level():
    """Simulated correct samples: the rejection rate of one check stays below its level."""
    rng = np.random.default_rng(2)
    outcomes = np.array([[0, 1]] * 40 + [[2, 3]] * 40, dtype=np.uint8)
    p = np.array([[0.5, 0.5]] * 40 + [[0.9, 0.1]] * 40)
    runs, level = 400 if not DEEP else 20000, 0.05
    rejected = sum(not fit(outcomes, p, _draw(p, outcomes, 16, rng), level).ok for _ in range(runs))
    assert rejected / runs <= level + 3 * math.sqrt(level * (1 - level) / runs)


@pytest.mark.parametrize("n,p", [(20, 0.5), (170, 2.0**-4), (2560, 2.0**-8)])
def test_the_dispersion_test_holds_its_level_and_sees_shared_random_numbers(n, p):
    """Per-call counts of groups of independent elements (Binomial(n, p) per group and
    call) are rejected at most at the stated rate; groups whose elements come in
    pairs sharing one random number (twice the variance) nearly always; counts that
    never vary (a stratified stream) always."""
    rng = np.random.default_rng(5)
    runs, level, groups = (2000 if not DEEP else 50000), 1e-2, 4
    sizes = np.full(groups, n)
    rejected = sum(dispersion_pvalue(rng.binomial(n, p, size=(64, groups)), sizes, p) < level for _ in range(runs))
    assert rejected / runs <= level + 3 * math.sqrt(level / runs)
    pairs = [2 * rng.binomial(n // 2, p, size=(64, groups)) for _ in range(200)]
    assert sum(dispersion_pvalue(c, sizes, p) < 1e-4 for c in pairs) >= 190
    assert dispersion_pvalue(np.full((64, groups), n * p), sizes, p) < 1e-6


def test_neighbour_groups_are_runs_of_at_least_the_needed_size():
    for n, p in [(40, 0.5), (1000, 0.25), (100000, 0.5), (7, 0.5)]:
        group = neighbour_groups(np.zeros(n), p)
        sizes = np.bincount(group)
        assert np.all(np.diff(group) >= 0) and group[0] == 0 and sizes.size <= 64
        assert sizes.size == 1 or sizes.min() * p * (1 - p) >= 10


def test_statistical_op_declaration_is_checked():
    op = OPS["float4_e2m1fn"]
    with pytest.raises(ValueError, match="calls"):
        dataclasses.replace(op, calls=1)
    with pytest.raises(ValueError, match="false_alarm"):
        dataclasses.replace(op, false_alarm=0.0)
    assert isinstance(op, StatisticalOp) and op.outputs == ("outcomes", "probabilities")
    assert op.defaults == {"sr_bits": 32, "overflow": "saturate", "nan": "max"}
    assert OPS["bfloat16"].variant_values["overflow"] == ("saturate", "nonsaturating")


# --- the judge -----------------------------------------------------------------------------------------------


def fast(op, calls=16):
    """Fewer calls per check keep the default run fast (the catalog's op makes 64)."""
    return dataclasses.replace(op, calls=calls)


@pytest.mark.parametrize("fmt", SR_FORMATS)
def test_the_exact_oracle_sampler_passes(fmt):
    op = fast(OPS[fmt])
    report = judge(op, cs.exact_pcg, examples=3)
    assert report.verdict == "pass", [f.describe() for f in report.failures]
    assert report.vectors_run + report.vectors_skipped == len(vectors(op)) and report.examples == 3
    assert report.vectors_skipped == sum(any(not op.axis(a).default == v for a, v in vec.params.items())
                                         for vec in vectors(op))  # vectors pinned to undeclared variant values


@pytest.mark.parametrize("fmt", ["float4_e2m1fn", "float8_e5m2fnuz", "float16", "bfloat16"])
def test_the_philox_sampler_passes_every_variant(fmt):
    op = fast(OPS[fmt])
    report = judge(op, cs.quantum_philox, dict(op.variant_values), examples=8)
    assert report.verdict == "pass", [f.describe() for f in report.failures]
    assert report.vectors_skipped == 0


@pytest.mark.parametrize("name", sorted(cs.BUGS))
def test_every_bug_is_rejected(name):
    sampler, fmt, variants, _ = cs.BUGS[name]
    report = judge(fast(OPS[fmt]), sampler, variants)
    assert report.verdict == "fail", name
    assert all(f.detail for f in report.failures)


def test_calls_cycle_through_memory_layouts():
    """A sampler that reads its input in memory order (ravel order 'K') instead of by
    index gives permuted codes for reversed and Fortran-order inputs: strays named
    with the layouts; the correct one, fed the same layouts, passes."""
    def memory_order(x, **kw):
        x = np.asarray(x)
        return cs.exact_pcg(np.asarray(x.ravel(order="K")).reshape(x.shape), **kw)

    op = fast(OPS["float8_e4m3fn"])
    report = judge(op, memory_order, examples=0)
    assert report.verdict == "fail"
    assert any("layout" in f.detail and "not one of its possible values" in f.detail for f in report.failures)
    assert judge(op, cs.exact_pcg, examples=0).verdict == "pass"


@pytest.mark.parametrize("name", sorted(cs.BUGS))
def test_every_bug_is_rejected_by_a_vector_carrying_its_flag(name):
    """The corpus rule: without random examples, the vectors flagged for the bug
    reject it (replayers in other languages see only the golden files)."""
    sampler, fmt, variants, flag = cs.BUGS[name]
    op = fast(OPS[fmt])
    skips = [Entry(op.name, str(v.id), "not flagged") for v in vectors(op) if flag not in v.flags]
    report = judge(op, sampler, variants, examples=0, skips=skips)
    assert report.verdict == "fail" and all(flag in f.flags for f in report.failures), name


@pytest.mark.parametrize("name", ["biased by half an ulp", "deterministic (round to nearest even)",
                                  "negative values step toward +Inf", "4 random bits read while 8 are declared"])
def test_random_examples_alone_reject(name):
    sampler, fmt, variants, _ = cs.BUGS[name]
    assert judge(fast(OPS[fmt]), sampler, variants, examples=20, with_vectors=False).verdict == "fail"


def _crash(x, **kw):
    raise RuntimeError("boom")


def _exit(x, **kw):
    raise SystemExit(3)


def _scribble(x, **kw):
    out = cs.exact_pcg(x, **kw)
    if x.size:
        x.reshape(-1)[0] = 0
    return out


@pytest.mark.parametrize("sampler, words", [
    (_crash, "raised RuntimeError: boom"), (_exit, "SystemExit"), (_scribble, "modified its input 'x'"),
    (lambda x, **kw: None, "got None"), (lambda x, **kw: cs.exact_pcg(x, **kw).astype(np.int32), "dtype"),
    (lambda x, **kw: (cs.exact_pcg(x, **kw),), "got a tuple"),
    (lambda x, **kw: cs.exact_pcg(x, **kw).reshape(-1), "shape"),
])
def test_candidate_misbehaviour_is_a_named_failure(sampler, words):
    report = judge(fast(OPS["float8_e4m3fn"], 4), sampler, examples=2)
    assert report.verdict == "fail" and any(words in f.detail for f in report.failures), \
        [f.detail for f in report.failures][:3]


def test_declined_cases_skips_and_xfails():
    op = fast(OPS["float8_e4m3fn"])

    def declines(x, **kw):
        raise NotImplementedError

    report = judge(op, declines, examples=2)
    assert report.verdict == "skipped" and report.unsupported > 0
    wrong = cs.BUGS["deterministic (round to nearest even)"][0]
    skips = [Entry(op.name, flag, "known") for flag in ("SrTie", "SrFraction", "SrWidth", "SrOverflow",
                                                        "SrSubnormal", "Random", "EmptyInput")] + \
        [Entry(op.name, "properties", "known")]
    assert judge(op, wrong, skips=skips).verdict == "pass"
    xfails = [Entry(op.name, "*", "rounds to nearest")]
    assert judge(op, wrong, xfails=xfails).verdict == "xfail"
    assert judge(op, cs.exact_pcg, xfails=[Entry(op.name, "1", "wrongly listed")]).verdict == "fail"


# --- measured: power and false alarms (deep) -----------------------------------------------------------------


def _oracle_sampler(op):
    """A correct sampler drawing straight from the oracle's distribution."""
    def sample(x, *, seed, fmt, **params):
        outcomes, p = sr_distribution(x, fmt, **params)
        return _draw(p, outcomes, 1, np.random.default_rng(seed))[0]
    return sample


def measure_power(runs: int = 50, examples: int = 50, with_vectors: bool = True) -> dict[str, float]:
    """Share of `runs` independent runs (fresh seeds) of the catalog's op (64 calls per
    check) that reject each bug; a run stops at its first failure (its verdict is known)."""
    out = {}
    for name, (sampler, fmt, variants, _) in sorted(cs.BUGS.items()):
        out[name] = sum(judge(OPS[fmt], sampler, variants, examples=examples, seed_base=1000 + i,
                              with_vectors=with_vectors, stop_at_failure=True).verdict == "fail"
                        for i in range(runs)) / runs
    return out


def measure_false_alarms(runs: int, fmt: str = "float4_e2m1fn", false_alarm: float | None = None,
                         examples: int = 50, calls: int = 64) -> tuple[int, int, int]:
    """(failed runs, checks whose first attempt rejected, checks) of a correct sampler
    drawing straight from the oracle's distribution."""
    op = dataclasses.replace(OPS[fmt], calls=calls, false_alarm=false_alarm or OPS[fmt].false_alarm)
    failed = first = checks = 0
    for i in range(runs):
        report = judge(op, _oracle_sampler(op), examples=examples, seed_base=50_000 + i)
        failed += report.verdict == "fail"
        checks += report.compared
        first += sum("re-run" in f.detail for f in report.failures)  # confirmed: both attempts rejected
        first += sum(int(n.split()[0]) for n in report.notes if n.endswith(RERUN_NOTE))
    return failed, first, checks


@pytest.mark.skipif(not DEEP, reason="HYPOTHESIS_PROFILE=deep: 50 runs per bug")
def test_power_against_every_bug():
    power = measure_power()
    assert all(rate >= 0.9 for rate in power.values()), power


@pytest.mark.skipif(not DEEP, reason="HYPOTHESIS_PROFILE=deep: hundreds of runs of a correct sampler")
def test_false_alarm_rate_is_what_the_op_states():
    """At the op's rate (1e-6) no run fails; at an inflated rate (0.2) the share of
    failing runs, and of checks rejected at their first attempt, stay within bounds."""
    failed, _, _ = measure_false_alarms(60)
    assert failed == 0
    runs, rate = 150, 0.2
    failed, first, checks = measure_false_alarms(runs, false_alarm=rate, examples=10, calls=16)
    assert failed / runs <= rate + 3 * math.sqrt(rate * (1 - rate) / runs)
    level = check_level(rate, checks // runs)
    assert first / checks <= level + 3 * math.sqrt(level * (1 - level) / checks)


def test_stop_at_failure_ends_the_run_with_the_same_verdict():
    sampler, fmt, variants, _ = cs.BUGS["deterministic (round to nearest even)"]
    full = judge(fast(OPS[fmt]), sampler, variants)
    short = judge(fast(OPS[fmt]), sampler, variants, stop_at_failure=True)
    assert full.verdict == short.verdict == "fail" and len(short.failures) == 1 < len(full.failures)
    assert short.examples == 0 and short.vectors_run < full.vectors_run
