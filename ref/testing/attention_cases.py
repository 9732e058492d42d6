"""Attention cases: the values, the inputs and the random cases the attention catalog
builds its vectors and examples from, public so that a test, an adapter's own check
or a later area (sparse attention, KV caches) draws the same ones.

Values come from one grid, exact at bfloat16 and float16 (stored as float32): a kernel
at either precision reads the numbers the oracle reads, and the bounded rule measures
its arithmetic, not a conversion.

  grid(rng, shape, std)                   the value grid
  qkv / packed / mla_inputs               inputs of attend, attend_varlen, mla
  attend_cases / varlen_cases / merge_cases / rope_cases / mla_cases
                                          hypothesis strategies of `Case`s, each taking
                                          the variant values an implementation supports
  attend_case_flags(case)                 "EmptyRow" / "EmptyInput" when a case has them
  LLAMA31, DEEPSEEK_V3_YARN, GPT_OSS_YARN published RoPE scaling configurations
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from hypothesis import strategies as st

from ref.attention.attend import visible_keys
from ref.formats.minifloat import round_to
from ref.testing.params import variant_params
from ref.testing.vector_files import Case

__all__ = [
    "DEEPSEEK_V3_YARN",
    "GPT_OSS_YARN",
    "LLAMA31",
    "MSCALE_ALONE",
    "attend_case_flags",
    "attend_cases",
    "grid",
    "merge_cases",
    "mla_cases",
    "mla_inputs",
    "packed",
    "qkv",
    "rope_cases",
    "varlen_cases",
]

DEEPSEEK_V3_YARN = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                    "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}
GPT_OSS_YARN = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                "beta_slow": 1.0, "truncate": False}
LLAMA31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192}
# YaRN configurations whose attention factor transformers and vLLM's DeepSeek rotary
# embedding read differently (rope.apply_rope's mscale_keys).
MSCALE_ALONE = tuple({"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 2048, **keys}
                     for keys in ({"mscale": 0.707}, {"mscale_all_dim": 0.707}, {"attention_factor": 1.25}))


def grid(rng: np.random.Generator, shape, std: float = 1.0) -> np.ndarray:
    """Normal values of standard deviation `std` rounded to bfloat16 and kept within
    float16's normal range (magnitudes below 2^-14 become 0, above 65280, the largest
    value both formats hold, become 65280): exact at both precisions, stored as float32."""
    x = round_to(rng.standard_normal(shape) * std, "bfloat16")
    x = np.where(np.abs(x) < 2.0**-14, 0.0, np.clip(x, -65280, 65280))
    return x.astype(np.float32)


def qkv(rng: np.random.Generator, b: int, lq: int, lk: int, hq: int, hkv: int, d: int, dv: int | None = None,
        std: float = 1.0) -> dict[str, np.ndarray]:
    """attend's q [b, lq, hq, d], k [b, lk, hkv, d] (both of `std`) and v [b, lk, hkv, dv]."""
    dv = d if dv is None else dv
    return {"q": grid(rng, (b, lq, hq, d), std), "k": grid(rng, (b, lk, hkv, d), std),
            "v": grid(rng, (b, lk, hkv, dv))}


def packed(rng: np.random.Generator, lqs: Sequence[int], lks: Sequence[int], hq: int, hkv: int, d: int,
           dv: int | None = None, std: float = 1.0) -> dict[str, np.ndarray]:
    """attend_varlen's inputs for sequences of lqs[i] queries over lks[i] keys: packed
    q, k, v and the int32 offsets cu_seqlens_q, cu_seqlens_k."""
    dv = d if dv is None else dv
    return {"q": grid(rng, (sum(lqs), hq, d), std), "k": grid(rng, (sum(lks), hkv, d), std),
            "v": grid(rng, (sum(lks), hkv, dv)),
            "cu_seqlens_q": np.cumsum([0, *lqs]).astype(np.int32),
            "cu_seqlens_k": np.cumsum([0, *lks]).astype(np.int32)}


def mla_inputs(rng: np.random.Generator, b: int, lq: int, lk: int, h: int, dn: int, dr: int, r: int, dv: int,
               std: float = 1.0) -> dict[str, np.ndarray]:
    """mla's q_nope [b, lq, h, dn], q_pe [b, lq, h, dr], c_kv [b, lk, r], k_pe [b, lk, dr]
    and w_kv_b [h * (dn + dv), r] (scaled by r^-1/2, as a trained projection is)."""
    return {"q_nope": grid(rng, (b, lq, h, dn), std), "q_pe": grid(rng, (b, lq, h, dr), std),
            "c_kv": grid(rng, (b, lk, r)), "k_pe": grid(rng, (b, lk, dr), std),
            "w_kv_b": grid(rng, (h * (dn + dv), r), 1 / math.sqrt(r))}


def _seeded(draw) -> np.random.Generator:
    return np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))


@st.composite
def _attention_case(draw, supported, varlen):
    params = draw(variant_params(supported))
    seed = draw(st.integers(0, 2**32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    hkv = draw(st.integers(1, 3), label="hkv")
    hq = hkv * draw(st.integers(1, 3), label="group")
    d = draw(st.sampled_from([1, 2, 4, 8, 16, 32]), label="d")
    dv = draw(st.sampled_from([d, 4, 8]), label="dv")
    std = draw(st.sampled_from([0.5, 1.0, 3.0]), label="std")
    causal = draw(st.booleans(), label="causal")
    params["causal"] = causal
    left = draw(st.sampled_from([-1, -1, 0, 1, 3]), label="window_left")
    right = 0 if causal else draw(st.sampled_from([-1, -1, 0, 2]), label="window_right")
    if left >= 0:
        params["window_left"] = left
        params["sink_tokens"] = draw(st.sampled_from([0, 0, 1, 2]), label="sink_tokens")
    if right >= 0 and not causal:
        params["window_right"] = right
    if draw(st.booleans(), label="softcap?"):
        params["softcap"] = draw(st.sampled_from([1.0, 5.0, 30.0]), label="softcap")
    if draw(st.booleans(), label="scale?"):
        params["scale"] = draw(st.sampled_from([0.125, 0.3, 1.0]), label="scale")
    inputs = {}
    # Rarer shapes come from a generator of their own, so that the draws (and values) of
    # every other example stay as they were.
    rare = np.random.default_rng([seed, 1]).random(2)
    if draw(st.booleans(), label="sinks?"):  # a third of them dominant, past exp's float32 range (88)
        offset = 100.0 if rare[0] < 1 / 3 else 0.0
        inputs["sinks"] = round_to(offset + grid(rng, (hq,), 2.0), "bfloat16").astype(np.float32)
    if varlen:
        nseq = draw(st.integers(0, 3), label="sequences")
        top = 100 if draw(st.integers(0, 7), label="long?") == 7 else 8
        lks = [draw(st.integers(0, top), label="lk") for _ in range(nseq)]
        lqs = [draw(st.integers(0, min(lk, 6) if top == 8 else lk), label="lq") for lk in lks]
        if lqs and draw(st.booleans(), label="more queries than keys?"):
            lqs[-1] = lks[-1] + draw(st.integers(1, 3), label="extra queries")
        inputs.update(packed(rng, lqs, lks, hq, hkv, d, dv, std))
        return Case(inputs, params)
    b = draw(st.integers(1, 2), label="batch")
    # Long is the last value of "long?", not the first: shrinking (toward 0) then leads
    # to a short case wherever the failure allows.
    if draw(st.integers(0, 7), label="long?") == 7:  # past a kernel's key tile, now and then
        lq, lk = draw(st.integers(0, 40), label="lq"), draw(st.integers(0, 300), label="lk")
        if rare[1] < 0.5:  # thousands of keys: a low-precision accumulator stalls
            lq, lk = min(lq, 3), 1000 + 10 * lk
    else:
        lq, lk = draw(st.integers(0, 9), label="lq"), draw(st.integers(0, 12), label="lk")
    inputs.update(qkv(rng, b, lq, lk, hq, hkv, d, dv, std))
    if draw(st.booleans(), label="mask?"):
        shape = draw(st.sampled_from([(lq, lk), (b, hq, lq, lk), (1, hq, lq, lk), (b, 1, lq, lk)]),
                     label="mask shape")
        inputs["mask"] = rng.random(shape) < 0.7
    return Case(inputs, params)


def attend_cases(supported: Mapping[str, Sequence]) -> st.SearchStrategy[Case]:
    """attend calls: GQA/MQA/MHA heads, head dims 1-32 (Dv may differ), causal or not,
    windows with sink tokens, soft-cap, explicit scale, learnable sinks (a third of them
    past float32 exp's range), explicit masks of every broadcast shape; Lq, Lk up to
    12, one case in eight long (up to 300 keys, or thousands of keys for up to 3
    queries)."""
    return _attention_case(supported, varlen=False)


def varlen_cases(supported: Mapping[str, Sequence]) -> st.SearchStrategy[Case]:
    """attend_varlen calls: the options of `attend_cases` over 0-3 packed sequences
    (empty ones included, one in eight long, up to 100 keys), the last sometimes with
    more queries than keys."""
    return _attention_case(supported, varlen=True)


@st.composite
def merge_cases(draw, supported: Mapping[str, Sequence]):
    """merge_states calls: two partials (o [N, H, Dv], lse [N, H]) with LSEs centred from
    -200 to 900 and spread up to 50, some rows empty (o 0, lse -inf) on either side."""
    params = draw(variant_params(supported))
    rng = _seeded(draw)
    n, h, dv = draw(st.integers(0, 6), label="n"), draw(st.integers(1, 4), label="h"), draw(
        st.integers(1, 16), label="dv")
    center = draw(st.sampled_from([0.0, 30.0, -200.0, 900.0]), label="center")
    spread = draw(st.sampled_from([0.5, 3.0, 50.0]), label="spread")
    inputs = {}
    for side in "ab":
        lse = (center + grid(rng, (n, h), spread)).astype(np.float32)
        empty = rng.random((n, h)) < draw(st.sampled_from([0.0, 0.3]), label=f"empty {side}")
        o = grid(rng, (n, h, dv))
        o[empty] = 0
        lse[empty] = -np.inf
        inputs[f"o_{side}"], inputs[f"lse_{side}"] = o, lse
    return Case(inputs, params)


@st.composite
def rope_cases(draw, supported: Mapping[str, Sequence]):
    """apply_rope calls: head dims 2-128, partial rotary dims, bases to 1e6, no scaling or
    a published one (Llama 3.1, DeepSeek-V3 and gpt-oss YaRN, linear, `MSCALE_ALONE`),
    positions up to 200000 over [*S, H] tokens."""
    params = draw(variant_params(supported))
    rng = _seeded(draw)
    d = draw(st.sampled_from([2, 4, 8, 16, 64, 128]), label="d")
    if draw(st.booleans(), label="partial?"):
        params["rotary_dim"] = 2 * draw(st.integers(0, d // 2), label="rotary_dim")
    if draw(st.booleans(), label="base?"):
        params["base"] = draw(st.sampled_from([10000.0, 500000.0, 1e6]), label="base")
    scaling = draw(st.sampled_from([None, LLAMA31, DEEPSEEK_V3_YARN, GPT_OSS_YARN,
                                    {"rope_type": "linear", "factor": 2.0}, *MSCALE_ALONE]), label="scaling")
    if scaling is not None:
        params["scaling"] = scaling
    shape = draw(st.sampled_from([(3, 2), (2, 4, 1), (1, 2, 3)]), label="shape")
    x = grid(rng, (*shape, d), draw(st.sampled_from([0.5, 1.0, 8.0]), label="std"))
    top = draw(st.sampled_from([16, 8192, 200000]), label="max position")
    positions = rng.integers(0, top, size=shape[:-1])
    return Case({"x": x, "positions": positions}, params)


@st.composite
def mla_cases(draw, supported: Mapping[str, Sequence]):
    """mla calls: 1-4 heads, small nope, rope, latent and value dims, up to 8 latent
    tokens (one case in eight up to 100), Lq <= Lk, causal or not, DeepSeek-V3's YaRN or
    no scaling."""
    params = draw(variant_params(supported))
    rng = _seeded(draw)
    h = draw(st.integers(1, 4), label="h")
    dn, dr = draw(st.sampled_from([4, 8, 16]), label="dn"), draw(st.sampled_from([2, 4, 8]), label="dr")
    r, dv = draw(st.sampled_from([4, 16, 32]), label="r"), draw(st.sampled_from([4, 8]), label="dv")
    lk = draw(st.integers(0, 100 if draw(st.integers(0, 7), label="long?") == 7 else 8), label="lk")
    lq = draw(st.integers(0, min(lk, 12)), label="lq")
    params["causal"] = draw(st.booleans(), label="causal")
    if draw(st.booleans(), label="yarn?"):
        params["rope_scaling"] = DEEPSEEK_V3_YARN
    return Case(mla_inputs(rng, draw(st.integers(1, 2), label="b"), lq, lk, h, dn, dr, r, dv,
                           draw(st.sampled_from([1.0, 3.0]), label="std")), params)


def _has_empty_row(lq: int, lk: int, params: Mapping, mask=None) -> bool:
    """Whether a query row of one sequence sees no key under the case's mask options."""
    if lq == 0 or lk == 0:  # no rows, or rows that see nothing
        return lq > 0
    window = {k: params[k] for k in ("causal", "window_left", "window_right", "sink_tokens") if k in params}
    visible = visible_keys(lq, lk, **window)
    if mask is not None:
        m = np.asarray(mask, dtype=bool)
        visible = visible & (m if m.ndim == 2 else m.reshape(-1, lq, lk))
    return bool((~visible.any(axis=-1)).any())


def attend_case_flags(case: Case) -> tuple[str, ...]:
    """The flags an attend or attend_varlen call exercises, from its shapes and masks:
    "EmptyRow" when a query row sees no key, "EmptyInput" when a sequence has no
    queries or no keys. A skip or xfail naming either covers random examples with it
    (engines that mask with finfo.min return the mean of V in an empty row;
    transformers' sdpa_attention_forward raises at Lq = 0)."""
    inputs, params = case.inputs, case.params
    if "cu_seqlens_q" in inputs:
        cq = np.asarray(inputs["cu_seqlens_q"], np.int64)
        ck = np.asarray(inputs["cu_seqlens_k"], np.int64)
        lens = list(zip(np.diff(cq).tolist(), np.diff(ck).tolist()))
        empty_row = any(_has_empty_row(lq, lk, params) for lq, lk in lens)
        empty_input = not lens or any(0 in pair for pair in lens)
    else:
        lq, lk = np.shape(inputs["q"])[1], np.shape(inputs["k"])[1]
        empty_row = _has_empty_row(lq, lk, params, inputs.get("mask"))
        empty_input = 0 in (lq, lk)
    return ("EmptyRow",) * empty_row + ("EmptyInput",) * empty_input
