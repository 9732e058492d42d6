"""The corpus rule, for every entry of every bug registry in tests/corpus: with no
random examples, a golden vector carrying the entry's flag rejects the bug.

Replayers in other languages see only the golden files, so a bug class that only
random examples (or exhaustive sweeps) catch is a gap in the vectors. Each registry
declares its flag at its own tuple position; REGISTRIES reads them all, and a
registry it does not know fails `test_every_registry_is_read`.
"""

from __future__ import annotations

import re
from pathlib import Path

import corpus
import numpy as np
import pytest
from corpus import (
    attention_impls,
    attention_tiled,
    cache_hashed,
    cache_paged,
    cache_paged_attention,
    cache_radix,
    formats_impls,
    groups_layouts,
    kernel_bugs,
    kv_kivi,
    kv_oscar,
    kv_qjl,
    kv_turboquant,
    quant_awq,
    quant_gemm,
    quant_gptq,
    quant_hadamard,
    quant_hqq,
    quant_lattice,
    quant_rtn,
    roofline_impls,
    specdec_rejection,
    specdec_trees,
)

import importlib

from ref.conformance.implementation import Implementation
from ref.conformance.runner import parse_entries, run
from ref.formats import decode
from ref.testing.vector_files import load_vectors

# What a runner check, not a flag, catches (kernel_bugs' second field), and how:
# on the vectors ("vector") or only outside them (by design: arrays past 2^24
# elements are too large for golden files).
NO_SWEEPS = parse_entries("*/exhaustive the sweeps are not golden vectors")
RUNNER_CHECKS = {"layout": "vector", "in place": "vector", "shared": "vector", "dtype": "vector",
                 "latitude": "vector", "large": "large cases"}


def _registries(path: Path) -> set[str]:
    return set(re.findall(r"^([A-Z0-9_]*BUGS) = ", path.read_text(), flags=re.M))


# Areas from the sparse area on: every tests/corpus/sparse_*.py and ssm_*.py module is
# read without a line here. Each registry maps name -> (op, flag, kernel), the module's `bug(name)`
# builds the Implementation, and an optional DEFAULT_PROFILE names the entries that stay
# in the default profile (the rest are marked deep).
AUTO_AREAS = ("sparse_*.py", "ssm_*.py")
AUTO = {path.stem: (importlib.import_module(f"corpus.{path.stem}"), _registries(path))
        for pattern in AUTO_AREAS for path in sorted(Path(corpus.__path__[0]).glob(pattern))}


def _entries():
    """(registry, name) -> (implementation factory, flag or runner check, ops or None)."""
    out = {}
    for name, e in formats_impls.BUGS.items():
        out["BUGS", name] = (lambda n=name: formats_impls.bug(n), e[4], None)
    for name, e in formats_impls.MX_BUGS.items():
        out["MX_BUGS", name] = (lambda n=name: formats_impls.mx_bug(n), e[3], None)
    for name, e in formats_impls.NVFP4_BUGS.items():
        out["NVFP4_BUGS", name] = (lambda n=name: formats_impls.nvfp4_bug(n), e[2], ["formats.nvfp4.*"])
    for name, (impl, flag) in groups_layouts.GROUP_LAYOUT_BUGS.items():
        out["GROUP_LAYOUT_BUGS", name] = (lambda i=impl: i, flag, None)
    for name, (impl, catcher) in kernel_bugs.KERNEL_BUGS.items():
        out["KERNEL_BUGS", name] = (lambda i=impl: i, catcher, None)
    for name, (bugs, precision, flag, op) in attention_impls.BUGS.items():
        out["attention BUGS", name] = (lambda b=bugs, p=precision: attention_impls.naive_impl(p, b), flag, [op])
    for name, (bugs, precision, flag) in attention_tiled.TILE_BUGS.items():
        out["TILE_BUGS", name] = (lambda b=bugs, p=precision: attention_tiled.tiled_impl(b, p), flag,
                                  ["attention.attend"])
    for name, (op, flag, _) in roofline_impls.BUGS.items():
        out["roofline BUGS", name] = (lambda n=name: roofline_impls.bug(n), flag, [op])
    for name, (flag, _) in cache_paged_attention.PAGED_ATTENTION_BUGS.items():
        out["PAGED_ATTENTION_BUGS", name] = (lambda n=name: cache_paged_attention.bug(n), flag,
                                             [cache_paged_attention.OP])
    for name, (op, flag, _) in cache_hashed.HASHED_BUGS.items():
        out["HASHED_BUGS", name] = (lambda n=name: cache_hashed.bug(n), flag, [op])
    for name, (op, flag, _) in cache_paged.PAGED_BUGS.items():
        out["PAGED_BUGS", name] = (lambda n=name: cache_paged.bug(n), flag, [op])
    for name, (op, flag, _) in specdec_trees.TREE_BUGS.items():
        out["TREE_BUGS", name] = (lambda n=name: specdec_trees.bug(n), flag, [op])
    for name, (_, flag) in cache_radix.RADIX_BUGS.items():
        out["RADIX_BUGS", name] = (lambda n=name: cache_radix.implementation(n), flag, ["cache.radix_cache"])
    # registries of (op, flag, kernel) entries whose module builds each kernel by `bug(name)`
    by_bug = ((specdec_rejection, "REJECTION_BUGS"), (quant_awq, "AWQ_BUGS"), (quant_lattice, "LATTICE_BUGS"),
              (quant_hqq, "HQQ_BUGS"), (quant_hadamard, "HADAMARD_BUGS"), (quant_rtn, "RTN_BUGS"),
              (quant_rtn, "PACK_BUGS"), (quant_gemm, "GEMM_BUGS"), (quant_gptq, "GPTQ_BUGS"),
              (kv_kivi, "KIVI_BUGS"), (kv_qjl, "QJL_BUGS"), (kv_turboquant, "TURBOQUANT_BUGS"),
              (kv_oscar, "OSCAR_BUGS"))
    by_bug += tuple((module, registry) for module, names in AUTO.values() for registry in sorted(names))
    for module, registry in by_bug:
        for name, (op, flag, _) in getattr(module, registry).items():
            out[registry, name] = (lambda m=module, n=name: m.bug(n), flag, [op])
    return out


ENTRIES = _entries()
REGISTRIES = {"formats_impls": {"BUGS", "MX_BUGS", "NVFP4_BUGS"}, "groups_layouts": {"GROUP_LAYOUT_BUGS"},
              "kernel_bugs": {"KERNEL_BUGS"}, "attention_impls": {"BUGS"}, "attention_tiled": {"TILE_BUGS"},
              "stochastic": {"BUGS"}, "roofline_impls": {"BUGS"},
              "cache_paged_attention": {"PAGED_ATTENTION_BUGS"},
              "cache_hashed": {"HASHED_BUGS"}, "cache_paged": {"PAGED_BUGS"},
              "cache_radix": {"RADIX_BUGS"}, "specdec_stochastic": {"SPECDEC_RNG_BUGS"},
              "specdec_trees": {"TREE_BUGS"}, "specdec_rejection": {"REJECTION_BUGS"},
              "quant_lattice": {"LATTICE_BUGS"},
              "quant_hqq": {"HQQ_BUGS"},
              "quant_hadamard": {"HADAMARD_BUGS"},
              "quant_awq": {"AWQ_BUGS"},
              "quant_rtn": {"RTN_BUGS", "PACK_BUGS"},
              "quant_gemm": {"GEMM_BUGS"},
              "quant_gptq": {"GPTQ_BUGS"},
              "kv_kivi": {"KIVI_BUGS"},
              "kv_qjl": {"QJL_BUGS"},
              "kv_turboquant": {"TURBOQUANT_BUGS"},
              "kv_oscar": {"OSCAR_BUGS"},
              **{stem: names for stem, (_, names) in AUTO.items()},
              }
# statistical samplers: the rule is checked in tests/test_statistical.py and tests/test_specdec_statistical.py

# Entries that random examples catch but no vector carrying their flag does (yet).
# Each is a named gap in the golden vectors, xfailed strictly: when a vector closes
# it, the test passes, the xfail turns into a failure, and the entry goes.
KNOWN_GAPS: dict[tuple[str, str], str] = {}


def test_every_registry_is_read():
    """A bug registry added to tests/corpus without a reader here fails."""
    found = {}
    for path in sorted(Path(corpus.__path__[0]).glob("*.py")):
        names = _registries(path)
        if names:
            found[path.stem] = names
    assert found == REGISTRIES


def _params():
    for key in ENTRIES:
        marks = [pytest.mark.xfail(reason=KNOWN_GAPS[key], strict=True)] if key in KNOWN_GAPS else []
        if key[0] in ("RTN_BUGS", "PACK_BUGS") and key[1] not in quant_rtn.DEFAULT_PROFILE:
            marks.append(pytest.mark.deep)  # about 0.5 s each: the issue's own entries stay in the default profile
        if key[0] == "TURBOQUANT_BUGS" and key[1] not in kv_turboquant.DEFAULT_PROFILE:
            marks.append(pytest.mark.deep)  # the issue's own entry stays in the default profile
        if key[0] == "OSCAR_BUGS" and key[1] not in kv_oscar.DEFAULT_PROFILE:
            marks.append(pytest.mark.deep)  # 0.1-0.2 s each: the entries stay in the default profile
        if key[0] == "KIVI_BUGS" and key[1] not in kv_kivi.DEFAULT_PROFILE:
            marks.append(pytest.mark.deep)  # 0.2-0.6 s each: ADV15's cheap entries and its requantize stay
        auto = [m for m, names in AUTO.values() if key[0] in names]
        if auto and key[1] not in getattr(auto[0], "DEFAULT_PROFILE", {key[1]}):
            marks.append(pytest.mark.deep)
        if key[0] == "GPTQ_BUGS":
            marks.append(pytest.mark.deep)  # 1-6 s each (43 vectors, each failure diagnosed by ~25 oracle runs)
        yield pytest.param(key, id=f"{key[0]}: {key[1]}", marks=marks)


@pytest.fixture(scope="module", autouse=True)
def _vectors_read_once():
    """Each op's golden vectors read (and their sha256s verified) once for the module's
    hundreds of runs, every run handed its own copy: a few hundred entries share a
    dozen ops."""
    import copy
    from functools import lru_cache

    from ref.conformance.judges import arrays

    read = lru_cache(maxsize=None)(arrays.load_vectors)  # the original, bound before the patch
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(arrays, "load_vectors", lambda name, golden=None: copy.deepcopy(read(name, golden)))
        yield


@pytest.mark.parametrize("key", list(_params()))
def test_bug_is_rejected_by_a_vector_carrying_its_flag(key):
    factory, flag, ops = ENTRIES[key]
    if RUNNER_CHECKS.get(flag) == "large cases":
        pytest.skip("caught by the large cases (conform --large), which golden files cannot hold")
    problem = _rule_broken(factory(), flag, ops)
    assert problem is None, f"{key[1]}: {problem}"


def _rule_broken(impl, flag: str, ops) -> str | None:
    """Why the golden vectors alone do not reject `impl` by a vector carrying `flag`
    (a runner check's name: by any vector), or None."""
    report = run(impl, ops=ops, examples=0, skips=NO_SWEEPS)
    failures = [f for r in report.ops for f in r.failures if f.where.startswith(("vector ", "latitude", "trace "))]
    if not failures:
        return "caught only outside the golden vectors"
    if flag not in RUNNER_CHECKS and not any(flag in f.flags for f in failures):
        return f"no failing vector carries {flag}: {[(f.where, f.flags) for f in failures]}"
    return None


_DECODE = "formats.float8_e4m3fn.decode"
_GOLDEN_INPUTS = {np.asarray(v.inputs["codes"]).tobytes() for v in load_vectors(_DECODE)}


def _right_on_golden_inputs_only(codes):
    out = decode(codes, "float8_e4m3fn")
    return out if np.asarray(codes).tobytes() in _GOLDEN_INPUTS else -out


def test_the_rule_fails_for_a_bug_only_examples_catch():
    impl = Implementation("cheat", {_DECODE: _right_on_golden_inputs_only})
    assert _rule_broken(impl, "Exhaustive", None) == "caught only outside the golden vectors"
    assert not run(impl, examples=10, shrink=False).ok  # random examples catch it


def test_the_rule_fails_for_a_vector_without_the_flag():
    impl = formats_impls.bug("NaN code decoded as a number")
    assert _rule_broken(impl, "Exhaustive", None) is None
    assert _rule_broken(impl, "NoSuchFlag", None).startswith("no failing vector carries NoSuchFlag")
