"""What a sequence keeps between steps: KV cache and recurrent state bytes (exact, int64).

  roofline.kv_bytes.attention    (tokens, layers, kv_heads, head_dim, v_head_dim, element_bits) -> bytes
  roofline.kv_bytes.mla          (tokens, layers, kv_lora_rank, qk_rope_head_dim, element_bits) -> bytes
  roofline.kv_bytes.quantized    (tokens, layers, kv_heads, head_dim, bits, group, residual) -> bytes (KIVI)
  roofline.state_bytes.mamba2    (layers, heads, head_dim, d_state, groups, conv_kernel, state_bits,
                                  conv_bits) -> bytes per sequence
  roofline.state_bytes.gated_delta (layers, key_heads, value_heads, key_head_dim, value_head_dim,
                                  conv_kernel, state_bits, conv_bits) -> bytes per sequence

Every input is an int64 array, all of one shape; the vectors name the published
configuration they use (config.json values) and the bug class each edge targets.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.roofline import kv
from ref.roofline.catalog.common import AREA, SHARED_FLAGS, dtype_vectors, invalid_vectors
from ref.testing.catalog_types import Flag, seed_for
from ref.testing.flags import COMMON, RANDOM
from ref.testing.compare import compare_exact
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS", "configs", "int_case"]

BIG = 1 << 62

FLAGS = {
    **{name: SHARED_FLAGS[name] for name in ("GQA", "Int64", "CeilOnce")},
    RANDOM: COMMON[RANDOM],  # the seeded random configurations
    "ValueHeadDim": Flag("values sized by the key head_dim where v_head_dim differs",
                         "the value half of the cache is mis-sized (MLA-derived and gated models)"),
    "MlaCacheEntry": Flag("MLA's cache counted as the latent alone (or as full per-head keys and values)",
                    "the 64-element RoPE key per token is dropped: 512 of 576 elements"),
    "KiviResidual": Flag("KIVI's full-precision residual window not subtracted, or whole groups not formed",
                         "tokens are billed at the quantized width before they are quantized"),
    "KiviValueGroups": Flag("values grouped per channel over tokens like keys (or keys per token like values)",
                            "the scale and zero-point overhead is that of the wrong axis"),
    "PartialGroup": Flag("a head_dim that is not a multiple of the value group floored instead of ceiled",
                         "the last partial channel group's scale and zero point are dropped"),
    "KiviScales": Flag("a group's scale counted without its zero point (16 bits per group, not 32)",
                       "KIVI's overhead is halved: the quantized cache looks smaller than it is"),
    "ConvState": Flag("the causal conv1d's conv_kernel - 1 cached inputs forgotten (or conv_kernel counted)",
                      "a recurrent layer's state is short by the conv window"),
    "SsmState": Flag("Mamba-2's state sized heads * d_state (Mamba-1's per-channel shape misread) or without "
                     "head_dim", "the SSM state, the bulk of the bytes, is head_dim times too small"),
}


def int_case(params: dict | None = None, **inputs) -> Case:
    """A case of int64 arrays (scalars become 0-d arrays)."""
    return Case({k: np.asarray(v, dtype=np.int64) for k, v in inputs.items()}, params or {})


def _spec(comment: str, flags, result: str = "valid", params: dict | None = None, **inputs) -> VectorSpec:
    return VectorSpec(comment, tuple(flags), int_case(params, **inputs), result)


def _invalid(make, names: tuple[str, ...], base: dict) -> list[VectorSpec]:
    """The invalid inputs every counting op refuses (common.invalid_vectors), from a valid `base`."""
    return invalid_vectors(int_case(None, **base), counts=names)


def _exactness(names: tuple[str, ...], rows: list[tuple[str, dict]]) -> list[VectorSpec]:
    """Int64 vectors, each in 0-d and 1-d form: (comment, inputs) rows."""
    out = []
    for comment, inputs in rows:
        out.append(_spec(comment + " (0-d inputs)", ("Int64",), **inputs))
        out.append(_spec(comment + " (1-d inputs)", ("Int64",), **{k: [inputs[k]] for k in names}))
    return out


def _dtypes(names: tuple[str, ...], big: dict, small: dict, what: str) -> list[VectorSpec]:
    """The same op with int32/uint32 inputs past 2^32 in the result, and uint8 inputs."""
    return dtype_vectors([(f"{what} (its bit count passes 2^32)", int_case(None, **big), (np.int32, np.uint32)),
                          ("a small configuration (every input below 256, the result past 255)",
                           int_case(None, **small), (np.uint8,))], names)


def _random(names: tuple[str, ...], op: str, maxima: dict, minima: dict | None = None, n: int = 12) -> VectorSpec:
    """Seeded random small configurations (not the published ones): a calculator keyed
    on the published models' numbers meets configurations it has not seen."""
    rng = np.random.default_rng(seed_for(op))
    minima = minima or {}
    return _spec("random small configurations (seeded)", ("Random",),
                 **{k: rng.integers(minima.get(k, 0), maxima[k] + 1, n) for k in names})


def _empty(names: tuple[str, ...]) -> VectorSpec:
    return _spec("empty int64 arrays give an empty int64 output (shape (0,))", ("EmptyInput",),
                 **{k: np.zeros(0, np.int64) for k in names})


def _stack(*rows: dict) -> dict:
    """Configs as one case of 1-d arrays, element i from rows[i]."""
    return {k: [r[k] for r in rows] for k in rows[0]}


def attention_vectors() -> list[VectorSpec]:
    qwen3_8b = dict(layers=36, kv_heads=8, head_dim=128, v_head_dim=128, element_bits=16)  # Qwen3-8B config.json
    llama_70b = dict(layers=80, kv_heads=8, head_dim=128, v_head_dim=128, element_bits=16)  # Llama-3.1-70B
    s = _spec
    return _more_attention() + [
        s("Qwen3-8B, one token: 36 * 8 * (128 + 128) * 2 bytes = 147,456 (the tour's figure)", ("GQA",),
          tokens=1, **qwen3_8b),
        s("Llama-3.1-70B class, one token: 80 * 8 * 256 * 2 = 327,680 (the tour's figure)", ("GQA",),
          tokens=1, **llama_70b),
        s("Qwen3-8B at 40,000 tokens (the tour's ~6 GB) and at 1M tokens (~147 GB)", ("GQA",),
          **_stack({"tokens": 40000, **qwen3_8b}, {"tokens": 1 << 20, **qwen3_8b}, {"tokens": 10**6, **qwen3_8b})),
        s("no tokens: no bytes", ("EmptyInput",), tokens=0, **qwen3_8b),
        s("an empty batch of configs", ("EmptyInput",), **{k: np.zeros(0, np.int64) for k in
                                                           ("tokens", *qwen3_8b)}),
        s("values narrower than keys (v_head_dim 64, head_dim 192)", ("ValueHeadDim",),
          tokens=3, layers=2, kv_heads=4, head_dim=192, v_head_dim=64, element_bits=16),
        s("3-bit elements: 1 * 1 * 1 * (1 + 2) * 3 = 9 bits -> 2 bytes once, not a byte per element",
          ("CeilOnce",), **_stack(dict(tokens=1, layers=1, kv_heads=1, head_dim=1, v_head_dim=2, element_bits=3),
                                  dict(tokens=5, layers=3, kv_heads=1, head_dim=1, v_head_dim=0, element_bits=3),
                                  dict(tokens=1, layers=3, kv_heads=1, head_dim=1, v_head_dim=0, element_bits=3))),
        s("Qwen3-8B at 2^20 tokens and at 2^36 tokens: past 2^31 and past 2^53 bytes", ("Int64",),
          **_stack({"tokens": 1 << 20, **qwen3_8b}, {"tokens": 1 << 36, **qwen3_8b})),
        s("a product just past 2^53 by one odd factor: exact in int64, rounded in float64", ("Int64",),
          tokens=(1 << 53) + 1, layers=1, kv_heads=1, head_dim=1, v_head_dim=0, element_bits=8),
        s("a result past 2^63 - 1 bytes is rejected, not wrapped", ("Int64", "InvalidInput"), "invalid",
          tokens=BIG, layers=2, kv_heads=1, head_dim=1, v_head_dim=1, element_bits=8),
        *_invalid(_spec, ("tokens", "layers", "kv_heads", "head_dim", "v_head_dim", "element_bits"),
                  {"tokens": 4, **qwen3_8b}),
    ]


def mla_vectors() -> list[VectorSpec]:
    dsv3 = dict(layers=61, kv_lora_rank=512, qk_rope_head_dim=64, element_bits=16)  # DeepSeek-V3 config.json
    s = _spec
    return _more_mla() + [
        s("DeepSeek-V3, one token: 61 * (512 + 64) * 2 = 70,272 bytes", ("MlaCacheEntry",), tokens=1, **dsv3),
        s("DeepSeek-V3 at 128k tokens, FP8 latent (vLLM's fp8 KV cache)", ("MlaCacheEntry",),
          tokens=131072, layers=61, kv_lora_rank=512, qk_rope_head_dim=64, element_bits=8),
        s("one layer-token of MLA against MHA's 32768 elements: 576 elements (57x fewer)", ("MlaCacheEntry",),
          tokens=1, layers=1, kv_lora_rank=512, qk_rope_head_dim=64, element_bits=8),
        s("no tokens: no bytes", ("EmptyInput",), tokens=0, **dsv3),
        s("an odd element width over three layers: 135 bits, 17 bytes once (18 rounded per layer)", ("CeilOnce",),
          tokens=3, layers=3, kv_lora_rank=3, qk_rope_head_dim=0, element_bits=5),
        s("DeepSeek-V3 at 2^40 tokens: past 2^53 bytes, exact", ("Int64",), tokens=1 << 40, **dsv3),
        s("a result past 2^63 - 1 bytes is rejected", ("Int64", "InvalidInput"), "invalid",
          tokens=BIG, layers=1, kv_lora_rank=16, qk_rope_head_dim=0, element_bits=8),
        *_invalid(_spec, ("tokens", "layers", "kv_lora_rank", "qk_rope_head_dim", "element_bits"),
                  {"tokens": 2, **dsv3}),
    ]


def quantized_vectors() -> list[VectorSpec]:
    base = dict(layers=36, kv_heads=8, head_dim=128, bits=2, group=32, residual=128)  # Qwen3-8B, KIVI-2 g32 r128
    s = _spec

    def row(tokens, **over):
        return {**base, "tokens": tokens, **over}
    return _more_quantized() + [
        s("Qwen3-8B with KIVI-2 (group 32, residual 128) at 40,000 tokens and at 1M tokens",
          ("KiviValueGroups", "KiviScales"),
          **_stack(row(40000), row(10**6))),
        s("tokens below the residual window: all kept at 16 bits", ("KiviResidual",),
          **_stack(row(0), row(1), row(127), row(128))),
        s("tokens = residual + group - 1: no whole group yet; + group: one group quantized", ("KiviResidual",),
          **_stack(row(128 + 31), row(128 + 32), row(128 + 33))),
        s("head_dim 100, value group 32: ceil(100 / 32) = 4 value groups per token", ("PartialGroup",
                                                                                        "KiviValueGroups"),
          **_stack(row(500, head_dim=100), row(257, head_dim=100, residual=0))),
        s("group 1 and residual 0: every token quantized, a scale per element", ("KiviValueGroups",),
          **_stack(row(7, group=1, residual=0), row(7, group=1, residual=0, bits=4))),
        s("3-bit codes over 2 layers x 3 heads: 350 bits per layer-head, 263 bytes once (264 per head)",
          ("CeilOnce",), tokens=5, layers=2, kv_heads=3, head_dim=1, bits=3, group=1, residual=0),
        s("no tokens", ("EmptyInput",), **row(0)),
        s("a 1M-token, 128-layer cache: past 2^31 bytes", ("Int64",), **row(10**6, layers=128)),
        s("group 0 is rejected", ("InvalidInput",), "invalid", **row(300, group=0)),
        *_invalid(_spec, ("tokens", "layers", "kv_heads", "head_dim", "bits", "group", "residual"), row(300)),
    ]


def mamba2_vectors() -> list[VectorSpec]:
    # Nemotron-H-8B's Mamba-2 layers (config.json: mamba_num_heads 128, mamba_head_dim 64, ssm_state_size 128,
    # n_groups 8, conv_kernel 4): fp32 state [128, 64, 128] = 4 MiB per layer (the tour's "~4 MB")
    nemotron = dict(heads=128, head_dim=64, d_state=128, groups=8, conv_kernel=4, state_bits=32, conv_bits=16)
    s = _spec
    return _more_mamba2() + [
        s("Nemotron-H-8B, one Mamba-2 layer: 4 MiB of fp32 state plus a bf16 conv window of 3 x 10240",
          ("SsmState", "ConvState"), layers=1, **nemotron),
        s("Nemotron-H-8B's 24 Mamba-2 layers", ("SsmState", "ConvState"), layers=24, **nemotron),
        s("conv_kernel 1: no conv window is cached", ("ConvState",), layers=2, **{**nemotron, "conv_kernel": 1}),
        s("no layers: no state", ("EmptyInput",), layers=0, **nemotron),
        s("a 4-bit state of one element, 8-bit conv of kernel 2: 4 + 3 * 8 = 28 bits -> 4 bytes", ("CeilOnce",),
          layers=1, heads=1, head_dim=1, d_state=1, groups=1, conv_kernel=2, state_bits=4, conv_bits=8),
        s("3 layers of 4 + 9 bits: 5 bytes once (6 rounded per layer, 9 with state and conv apart)", ("CeilOnce",),
          layers=3, heads=1, head_dim=1, d_state=1, groups=1, conv_kernel=2, state_bits=4, conv_bits=3),
        s("2^20 layers of Nemotron-H's: past 2^31 bytes", ("Int64",), layers=1 << 20, **nemotron),
        s("conv_kernel 0 is rejected", ("InvalidInput",), "invalid", layers=1, **{**nemotron, "conv_kernel": 0}),
        *_invalid(_spec, ("layers", "heads", "head_dim", "d_state", "groups", "conv_kernel", "state_bits",
                          "conv_bits"), {"layers": 1, **nemotron}),
    ]


def gated_delta_vectors() -> list[VectorSpec]:
    # Qwen3-Next-80B-A3B's linear attention (config.json: linear_num_key_heads 16, linear_num_value_heads 32,
    # linear_key_head_dim 128, linear_value_head_dim 128, linear_conv_kernel_dim 4): 36 of its 48 layers
    qwen3_next = dict(key_heads=16, value_heads=32, key_head_dim=128, value_head_dim=128, conv_kernel=4,
                      state_bits=32, conv_bits=16)
    s = _spec
    return _more_gated_delta() + [
        s("Qwen3-Next-80B-A3B's 36 Gated DeltaNet layers: fp32 state [32, 128, 128] each, bf16 conv window",
          ("ConvState",), layers=36, **qwen3_next),
        s("more value heads than key heads: the state has value_heads slices of [dk, dv]", ("GQA",),
          layers=1, key_heads=1, value_heads=4, key_head_dim=8, value_head_dim=16, conv_kernel=4, state_bits=16,
          conv_bits=16),
        s("conv_kernel 1: no conv window", ("ConvState",), layers=2, **{**qwen3_next, "conv_kernel": 1}),
        s("no layers: no state", ("EmptyInput",), layers=0, **qwen3_next),
        s("3 layers of 3-bit state and conv (36 bits): 5 bytes once, 6 per layer", ("CeilOnce",), layers=3,
          key_heads=1, value_heads=1, key_head_dim=1, value_head_dim=1, conv_kernel=2, state_bits=3, conv_bits=3),
        s("2^24 layers: past 2^31 bytes and exact", ("Int64",), layers=1 << 24, **qwen3_next),
        s("conv_kernel 0 is rejected", ("InvalidInput",), "invalid", layers=1, **{**qwen3_next, "conv_kernel": 0}),
        *_invalid(_spec, ("layers", "key_heads", "value_heads", "key_head_dim", "value_head_dim", "conv_kernel",
                          "state_bits", "conv_bits"), {"layers": 1, **qwen3_next}),
    ]


KV_NAMES = ("tokens", "layers", "kv_heads", "head_dim", "v_head_dim", "element_bits")
MLA_NAMES = ("tokens", "layers", "kv_lora_rank", "qk_rope_head_dim", "element_bits")
KIVI_NAMES = ("tokens", "layers", "kv_heads", "head_dim", "bits", "group", "residual")
MAMBA2_NAMES = ("layers", "heads", "head_dim", "d_state", "groups", "conv_kernel", "state_bits", "conv_bits")
GDN_NAMES = ("layers", "key_heads", "value_heads", "key_head_dim", "value_head_dim", "conv_kernel", "state_bits",
             "conv_bits")
_P53, _P24 = (1 << 53) + 1, (1 << 24) + 1  # odd: float64 (float32) cannot hold them


def _more_attention() -> list[VectorSpec]:
    qwen3_8b = dict(layers=36, kv_heads=8, head_dim=128, v_head_dim=128, element_bits=16)  # Qwen3-8B config.json
    one = dict(layers=1, kv_heads=1, head_dim=1, v_head_dim=0, element_bits=8)
    return [
        *_exactness(KV_NAMES, [("2^60 tokens of one 8-bit element: 2^63 bits (past int64), 2^60 bytes (fits)",
                                dict(tokens=1 << 60, **one))]),
        *_dtypes(KV_NAMES, dict(tokens=40000, **qwen3_8b), dict(tokens=255, **qwen3_8b),
                 "Qwen3-8B at 40,000 tokens"),
        _random(KV_NAMES, "roofline.kv_bytes.attention", _SMALL),
    ]


def _more_mla() -> list[VectorSpec]:
    dsv3 = dict(layers=61, kv_lora_rank=512, qk_rope_head_dim=64, element_bits=16)  # DeepSeek-V3 config.json
    one = dict(layers=1, kv_lora_rank=1, qk_rope_head_dim=0, element_bits=8)
    return [
        _spec("a RoPE key other than DeepSeek's 64 beside a latent other than 512: (1 + 1) * 8 bits = 2 bytes",
              ("MlaCacheEntry",), tokens=1, layers=1, kv_lora_rank=1, qk_rope_head_dim=1, element_bits=8),
        _spec("MHA2MLA-style caches: latent 256 + RoPE 32, latent 128 + RoPE 128 (not DeepSeek's 512/64)",
              ("MlaCacheEntry",), **_stack(dict(tokens=3, layers=2, kv_lora_rank=256, qk_rope_head_dim=32,
                                                element_bits=16),
                                           dict(tokens=5, layers=3, kv_lora_rank=128, qk_rope_head_dim=128,
                                                element_bits=8))),
        *_exactness(MLA_NAMES, [("2^53 + 1 tokens of one byte: an odd count past 2^53", dict(tokens=_P53, **one)),
                                ("2^24 + 1 tokens of one byte: an odd count past float32's 2^24",
                                 dict(tokens=_P24, **one)),
                                ("2^60 tokens of one byte: 2^63 bits (past int64), 2^60 bytes (fits)",
                                 dict(tokens=1 << 60, **one))]),
        _empty(MLA_NAMES),
        *_dtypes(MLA_NAMES, dict(tokens=40000, **dsv3), dict(tokens=255, layers=61, kv_lora_rank=255,
                                                             qk_rope_head_dim=64, element_bits=16),
                 "DeepSeek-V3 at 40,000 tokens"),
        _random(MLA_NAMES, "roofline.kv_bytes.mla", _SMALL),
    ]


def _more_quantized() -> list[VectorSpec]:
    one = dict(layers=1, kv_heads=1, head_dim=1, bits=8, group=1, residual=0)
    kivi = dict(layers=36, kv_heads=8, head_dim=128, bits=2, group=32, residual=128)  # Qwen3-8B, KIVI-2
    return [
        _spec("a residual that is not a multiple of the group: 3 tokens, residual 1, group 2: 2 quantized, 1 kept",
              ("KiviResidual",), tokens=3, layers=1, kv_heads=1, head_dim=1, bits=2, group=2, residual=1),
        _spec("residual 100, group 32 at 132, 163 and 164 tokens: whole groups past the window, not past 128",
              ("KiviResidual",), **_stack(*(dict(kivi, tokens=t, residual=100) for t in (132, 163, 164)))),
        *_exactness(KIVI_NAMES, [("2^53 + 1 tokens, group 1, residual 0: 10 * (2^53 + 1) bytes, exact",
                                  dict(tokens=_P53, **one)),
                                 ("2^24 + 1 tokens all in the residual window: 4 * (2^24 + 1) bytes (float32 rounds)",
                                  dict(one, tokens=_P24, residual=_P24)),
                                 ("2^57 tokens, group 1: 80 * 2^57 bits (past int64), 10 * 2^57 bytes (fits)",
                                  dict(tokens=1 << 57, **one))]),
        _empty(KIVI_NAMES),
        *_dtypes(KIVI_NAMES, dict(tokens=200000, **kivi), dict(kivi, tokens=255, head_dim=128, residual=64),
                 "Qwen3-8B with KIVI-2 at 200,000 tokens"),
        _random(KIVI_NAMES, "roofline.kv_bytes.quantized", _SMALL, {"group": 1}),
    ]


def _more_state(names, op: str, one: dict, config: dict, layers: tuple[int, int], what: str) -> list[VectorSpec]:
    """A recurrent state's exactness, empty, dtype and random vectors: `one` a one-byte
    state, `config` a published layer, `layers` its (large, table) layer counts."""
    return [
        *_exactness(names, [("2^53 + 1 layers of a one-byte state: an odd count past 2^53", dict(layers=_P53, **one)),
                            ("2^24 + 1 layers of a one-byte state: past float32's 2^24", dict(layers=_P24, **one)),
                            ("2^60 layers of a one-byte state: 2^63 bits (past int64), 2^60 bytes",
                             dict(layers=1 << 60, **one))]),
        _empty(names),
        *_dtypes(names, dict(layers=layers[0], **config), dict(layers=layers[1], **config), what),
        _random(names, op, _SMALL, {"conv_kernel": 1}),
    ]


def _more_mamba2() -> list[VectorSpec]:
    one = dict(heads=1, head_dim=1, d_state=1, groups=0, conv_kernel=1, state_bits=8, conv_bits=8)
    nemotron = dict(heads=128, head_dim=64, d_state=128, groups=8, conv_kernel=4, state_bits=32, conv_bits=16)
    return _more_state(MAMBA2_NAMES, "roofline.state_bytes.mamba2", one, nemotron, (128, 4),
                       "128 of Nemotron-H-8B's Mamba-2 layers")


def _more_gated_delta() -> list[VectorSpec]:
    one = dict(key_heads=0, value_heads=1, key_head_dim=1, value_head_dim=1, conv_kernel=1, state_bits=8, conv_bits=8)
    qwen3_next = dict(key_heads=16, value_heads=32, key_head_dim=128, value_head_dim=128, conv_kernel=4,
                      state_bits=32, conv_bits=16)
    return _more_state(GDN_NAMES, "roofline.state_bytes.gated_delta", one, qwen3_next, (300, 36),
                       "300 of Qwen3-Next-80B-A3B's Gated DeltaNet layers")


# the random vectors' ranges: small, unlike any published configuration
_SMALL = {"tokens": 300, "layers": 9, "kv_heads": 9, "head_dim": 200, "v_head_dim": 200, "element_bits": 17,
          "kv_lora_rank": 700, "qk_rope_head_dim": 99, "bits": 9, "group": 40, "residual": 150, "heads": 33,
          "d_state": 99, "groups": 5, "conv_kernel": 6, "state_bits": 33, "conv_bits": 33, "key_heads": 9,
          "value_heads": 17, "key_head_dim": 99, "value_head_dim": 99}



def configs(names: tuple[str, ...], maxima: dict[str, int], minima: dict[str, int] | None = None,
            max_side: int = 4) -> st.SearchStrategy:
    """Cases of 1-d int64 arrays of one drawn length, each name's values in
    [minima.get(name, 0), maxima[name]]."""
    minima = minima or {}

    @st.composite
    def draw_case(draw):
        n = draw(st.integers(0, max_side), label="n")
        return int_case(**{k: draw(st.lists(st.integers(minima.get(k, 0), maxima[k]), min_size=n, max_size=n),
                                   label=k) for k in names})
    return draw_case()


_DIMS = {"tokens": 1 << 20, "layers": 128, "kv_heads": 64, "head_dim": 256, "v_head_dim": 256, "element_bits": 16,
         "kv_lora_rank": 1024, "qk_rope_head_dim": 128, "bits": 8, "group": 128, "residual": 256, "heads": 256,
         "d_state": 256, "groups": 16, "conv_kernel": 8, "state_bits": 32, "conv_bits": 32, "key_heads": 64,
         "value_heads": 64, "key_head_dim": 256, "value_head_dim": 256}


def _op(name: str, oracle, anchor: str, summary: str, vectors, names: tuple[str, ...], minima=None):
    return AREA.exact(name, oracle, anchor=anchor, summary=summary, vectors=vectors, compare=compare_exact,
                          examples=lambda supported: configs(names, _DIMS, minima))


OPERATIONS = [
    _op("kv_bytes.attention", kv.kv_attention_bytes, "kv-bytes", "KV cache bytes of MHA/GQA layers",
        attention_vectors, ("tokens", "layers", "kv_heads", "head_dim", "v_head_dim", "element_bits")),
    _op("kv_bytes.mla", kv.kv_mla_bytes, "kv-bytes-mla", "KV cache bytes of MLA (latent + RoPE key)",
        mla_vectors, ("tokens", "layers", "kv_lora_rank", "qk_rope_head_dim", "element_bits")),
    _op("kv_bytes.quantized", kv.kv_quantized_bytes, "kv-bytes-quantized",
        "KIVI-style quantized KV cache bytes (scales, zero points, full-precision residual)", quantized_vectors,
        ("tokens", "layers", "kv_heads", "head_dim", "bits", "group", "residual"), {"group": 1}),
    _op("state_bytes.mamba2", kv.mamba2_state_bytes, "state-bytes", "Mamba-2 state bytes per sequence",
        mamba2_vectors, ("layers", "heads", "head_dim", "d_state", "groups", "conv_kernel", "state_bits",
                         "conv_bits"), {"conv_kernel": 1}),
    _op("state_bytes.gated_delta", kv.gated_delta_state_bytes, "state-bytes-gated-delta",
        "Gated DeltaNet state bytes per sequence", gated_delta_vectors,
        ("layers", "key_heads", "value_heads", "key_head_dim", "value_head_dim", "conv_kernel", "state_bits",
         "conv_bits"), {"conv_kernel": 1}),
]
