"""The attention suite's teeth: each wrong kernel of the corpus is rejected by a
golden vector carrying its flag, correct kernels at every precision and in other
loop orders pass, and spoiled outputs (negative controls) fail."""

from __future__ import annotations

import pytest
from corpus.attention_impls import BUGS, CORRECT, naive_impl, negative_control
from corpus.attention_tiled import tiled_impl

from ref.conformance.runner import run

OPS = ["attention.*"]


# That each bug is rejected by a golden vector carrying its flag: test_runner_corpus_rule.py.


@pytest.mark.parametrize(("precision", "tiles"), [("bfloat16", (32, 16)), ("float16", (128, 64)),
                                                  ("float32", (7, 3)), ("bfloat16", (7, 3))])
def test_a_correct_tile_loop_passes(precision, tiles):
    """Each precision and each tile shape at least once (test_correct_kernel_passes has more)."""
    bq, bk = tiles
    report = run(tiled_impl(precision=precision, bq=bq, bk=bk), ops=["attention.attend"], examples=10, shrink=False)
    assert report.ok, report.details()


# Bugs that need a curated input: random examples rarely meet them.
VECTOR_ONLY = {"softmax without the row maximum", "one maximum for the whole tile", "merge without the max shift",
               "sink in the LSE swapped", "window one key too wide"}


# Accumulation bugs show only over thousands of keys, rounded key by key: each such
# example takes seconds. The golden vectors reject them in the default run
# (test_runner_corpus_rule.py); their search by properties alone runs with `-m deep`.
SLOW_PROPERTIES = {"P.V accumulated in float16", "softmax denominator accumulated in bfloat16"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.deep) if n in SLOW_PROPERTIES else n
                                  for n in sorted(set(BUGS) - VECTOR_ONLY)])
def test_bug_is_rejected_by_properties_alone(name):
    bugs, precision, _, op = BUGS[name]
    impl = naive_impl(precision, bugs)
    report = run(impl, ops=[op], examples=60, shrink=False, skips=_no_vectors())
    assert sum(r.vectors_run for r in report.ops) == 0
    assert not report.ok, f"{name}: the properties accepted it"


def _no_vectors():
    from ref.conformance.runner import parse_entries
    from ref.testing.vector_files import load_manifest

    manifest = load_manifest()["ops"]
    return parse_entries("\n".join(f"{op}/{i} properties only" for op in manifest if op.startswith("attention.")
                                   for i in range(1, manifest[op]["vectors"] + 1)))


# Tile loops of a few keys at low precision round every partial sum: tens of seconds
# for the golden vectors alone. test_a_correct_tile_loop_passes keeps a small-tile
# bfloat16 loop and every precision in the default run; these run with `-m deep`.
SLOW_CORRECT = {"tiled bfloat16 3x5", "tiled float16 8x4"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.deep) if n in SLOW_CORRECT else n
                                  for n in CORRECT])
def test_correct_kernel_passes(name):
    report = run(CORRECT[name](), ops=OPS, examples=15, shrink=False)
    assert report.ok, report.details()
    assert any(r.verdict == "pass" for r in report.ops)


@pytest.mark.parametrize("kind", ["zeros", "shuffled rows", "neighbouring head"])
@pytest.mark.parametrize("precision", ["bfloat16", "float16", "float32"])
def test_negative_controls_are_rejected(kind, precision):
    report = run(negative_control(kind, precision), ops=["attention.attend"], examples=0)
    (row,) = [r for r in report.ops if r.verdict != "not covered"]
    assert row.verdict == "fail"
    assert row.vectors_run - row.vectors_passed >= 20  # nearly every valid vector, not a lucky one


@pytest.mark.parametrize("precision", ["bfloat16", "float16", "float32"])
def test_torch_sdpa_passes_where_it_has_the_features(precision):
    pytest.importorskip("torch")
    from corpus.torch_attention import sdpa_impl

    report = run(sdpa_impl(precision), ops=["attention.attend"], examples=30, shrink=False)
    (row,) = [r for r in report.ops if r.op == "attention.attend"]
    assert report.ok, report.details()
    assert row.verdict == "pass" and row.unsupported > 0 and row.vectors_passed >= 40


def test_empty_rows_declared_undefined_cover_vectors_and_examples():
    """A kernel that leaves rows seeing no key undefined (the mean of V, as Hugging Face's
    eager attention gives) passes when its skips name EmptyRow: every vector with a
    fully masked row carries the flag, and attention's case_flags marks such examples."""
    from ref.conformance.catalog import discover
    from ref.conformance.runner import parse_entries

    if discover()["attention.attend"].case_flags is None:
        pytest.skip("attention.attend declares no case_flags yet")
    impl = naive_impl("bfloat16", {"empty row uniform"})
    skips = parse_entries("attention.attend/EmptyRow rows that see no key are padding here")
    report = run(impl, ops=["attention.attend"], examples=40, shrink=False, skips=skips)
    (row,) = report.ops
    assert row.verdict == "pass", report.details()
    assert any("skipped: their flags are in the skips" in n for n in row.notes)  # examples met empty rows
    assert not run(impl, ops=["attention.attend"], examples=0).ok  # without the entry, the vectors reject it
