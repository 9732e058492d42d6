"""roofline.params.decoder: parameters of a GQA decoder (Llama, Qwen2, Qwen3, Qwen2-MoE,
Qwen3-MoE) as transformers builds it.

  (layers, hidden, heads, kv_heads, head_dim, intermediate, experts, top_k,
   expert_intermediate, shared_intermediate, vocab: int64; tied, qk_norm, bias,
   shared_gate: bool; all one shape) -> (total, active) int64

Exact. The published models among the vectors are named in their comments, with the
count their model card states; the oracle computes every expected value.
"""

from __future__ import annotations

from functools import partial

import numpy as np
from hypothesis import strategies as st

from ref.roofline.params import decoder_params
from ref.roofline.catalog.common import AREA, SHARED_FLAGS, dtype_vectors, invalid_vectors
from ref.testing.catalog_types import Flag, seed_for
from ref.testing.compare import compare_exact, compare_parts
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS", "decoder_case", "decoder_row", "decoder_rows"]

FLAGS = {
    "TiedEmbeddings": Flag("the embedding counted twice when the LM head is tied to it (or the LM head never "
                           "counted)", "a tied model is vocab*hidden too large (Qwen3-0.6B: 0.16B, 27% too many)"),
    "QkNorm": Flag("Qwen3's q and k RMSNorms (2*head_dim per layer) forgotten",
                   "the count is short by 2*head_dim*layers"),
    "AttentionBias": Flag("Qwen2's q/k/v biases forgotten, or an o_proj bias added",
                          "the count is off by (heads + 2*kv_heads)*head_dim (or hidden) per layer"),
    "ActiveExperts": Flag("all experts counted as active, or the embedding and LM head left out of the active "
                          "count", "an MoE model's active parameters are its total (Qwen3-30B-A3B: 30.5B, not 3.3B)"),
    "SharedExpert": Flag("a shared expert (or its sigmoid gate) forgotten, or counted among the routed ones",
                         "an MoE model's total and active counts miss 3*hidden*shared_intermediate per layer"),
    **{name: SHARED_FLAGS[name] for name in ("GQA", "Int64")},
}

NAMES = ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "experts", "top_k",
         "expert_intermediate", "shared_intermediate", "vocab")
BOOLS = ("tied", "qk_norm", "bias", "shared_gate")


def decoder_case(rows: list[tuple], shape: tuple[int, ...] | None = None) -> Case:
    """A case from (11 counts, 4 bools) rows; shape () for one row as 0-d arrays."""
    width = len(NAMES) + len(BOOLS)
    table = list(zip(*rows)) if rows else [()] * width
    inputs = {}
    for i, name in enumerate(NAMES + BOOLS):
        dtype = np.int64 if name in NAMES else np.bool_
        arr = np.array(table[i], dtype=dtype)
        inputs[name] = arr.reshape(shape) if shape is not None else arr
    return Case(inputs)


def decoder_row(layers, hidden, heads, kv_heads, head_dim, intermediate, vocab, *, experts=0, top_k=0,
         expert_intermediate=0, shared_intermediate=0, tied=False, qk_norm=False, bias=False,
         shared_gate=False) -> tuple:
    return (layers, hidden, heads, kv_heads, head_dim, intermediate, experts, top_k, expert_intermediate,
            shared_intermediate, vocab, tied, qk_norm, bias, shared_gate)


# Published configurations (config.json on huggingface.co; the model card's count in the comment).
QWEN3_8B = decoder_row(36, 4096, 32, 8, 128, 12288, 151936, qk_norm=True)  # "8.2B"
QWEN3_30B_A3B = decoder_row(48, 2048, 32, 4, 128, 0, 151936, experts=128, top_k=8, expert_intermediate=768,
                            qk_norm=True)  # "30.5B total, 3.3B activated"
LLAMA31_70B = decoder_row(80, 8192, 64, 8, 128, 28672, 128256)  # "70B"
LLAMA31_8B = decoder_row(32, 4096, 32, 8, 128, 14336, 128256)  # "8B"
QWEN25_7B = decoder_row(28, 3584, 28, 4, 128, 18944, 152064, bias=True)  # "7.61B"
QWEN3_06B = decoder_row(28, 1024, 16, 8, 128, 3072, 151936, tied=True, qk_norm=True)  # "0.6B"
QWEN15_MOE_A27B = decoder_row(24, 2048, 16, 16, 128, 0, 151936, experts=60, top_k=4, expert_intermediate=1408,
                              shared_intermediate=5632, bias=True, shared_gate=True)  # "14.3B, 2.7B activated"


def _vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("roofline.params.decoder"))
    v: list[VectorSpec] = []

    def add(comment, flags, case, result="valid"):
        v.append(VectorSpec(comment, tuple(flags), case, result))

    add("Qwen3-8B (model card: 8.2B; 8,190,735,360 with embedding and LM head), as 0-d inputs",
        ["GQA", "QkNorm", "Int64"], decoder_case([QWEN3_8B], ()))
    add("Qwen3-30B-A3B (model card: 30.5B total, 3.3B activated: embedding and LM head in both)",
        ["ActiveExperts", "GQA", "QkNorm", "Int64"], decoder_case([QWEN3_30B_A3B]))
    add("Llama-3.1-70B and Llama-3.1-8B (model cards: 70B, 8B): untied, no biases, no q/k norms",
        ["GQA", "Int64"], decoder_case([LLAMA31_70B, LLAMA31_8B]))
    add("Qwen2.5-7B (model card: 7.61B): q/k/v biases, no o_proj bias", ["AttentionBias", "GQA", "Int64"],
        decoder_case([QWEN25_7B]))
    add("Qwen3-0.6B (model card: 0.6B): tied embeddings, the LM head not counted again",
        ["TiedEmbeddings", "QkNorm", "GQA"], decoder_case([QWEN3_06B]))
    add("Qwen1.5-MoE-A2.7B (model card: 14.3B, 2.7B activated): shared expert with its sigmoid gate, "
        "q/k/v biases, MHA", ["SharedExpert", "ActiveExperts", "AttentionBias", "Int64"],
        decoder_case([QWEN15_MOE_A27B]))
    add("the same layer as MHA (kv_heads = heads) and as GQA (kv_heads = heads/4) and MQA (kv_heads = 1)",
        ["GQA"], decoder_case([decoder_row(2, 64, 8, k, 8, 96, 100) for k in (8, 2, 1)]))
    add("each flag alone on one small model: tied, qk_norm, bias", ["TiedEmbeddings", "QkNorm", "AttentionBias"],
        decoder_case([decoder_row(3, 32, 4, 2, 8, 48, 50, tied=t, qk_norm=q, bias=b)
               for t, q, b in ((False, False, False), (True, False, False), (False, True, False),
                               (False, False, True))]))
    add("MoE (Qwen3-MoE's layout): all experts active (top_k = experts), and one of many", ["ActiveExperts"],
        decoder_case([decoder_row(2, 32, 4, 2, 8, 0, 50, experts=8, top_k=k, expert_intermediate=16, qk_norm=True)
               for k in (8, 1)]))
    add("MoE (Qwen2-MoE's layout): a gated shared expert, and a gate on a shared expert of width 0",
        ["ActiveExperts", "SharedExpert"],
        decoder_case([decoder_row(2, 32, 4, 2, 8, 0, 50, experts=8, top_k=2, expert_intermediate=16,
                                  shared_intermediate=w, shared_gate=True) for w in (24, 0)]))
    add("MoE: a shared expert without a gate (DeepSeek's layout)", ["SharedExpert"],
        decoder_case([decoder_row(2, 32, 4, 2, 8, 0, 50, experts=8, top_k=2, expert_intermediate=16,
                                  shared_intermediate=24)]))
    add("zero layers: embedding, final norm and LM head only", ["TiedEmbeddings"],
        decoder_case([decoder_row(0, 64, 8, 2, 8, 96, 100), decoder_row(0, 64, 8, 2, 8, 96, 100, tied=True)]))
    add("odd counts past 2^53 (a million layers of a wide model, odd hidden): exact, not rounded to float64",
        ["Int64"], decoder_case([decoder_row(1_000_004, 65537, 128, 8, 128, 262145, 1_000_003)]))
    add("random small models in a [2, 3] batch", ["Random"], decoder_case([_random_row(rng) for _ in range(6)], (2, 3)))
    add("no models (empty arrays)", ["EmptyInput"], decoder_case([]))
    add("a total past int64 is rejected, not wrapped", ["Int64", "InvalidInput"],
        decoder_case([decoder_row(1 << 24, 1 << 20, 1 << 10, 1 << 10, 1 << 10, 1 << 20, 1 << 20)]), "invalid")
    bad = {
        "a negative layer count": dict(layers=-1),
        "kv_heads 0": dict(kv_heads=0),
        "heads not a multiple of kv_heads": dict(heads=6, kv_heads=4),
        "an MoE model with a dense intermediate": dict(experts=4, top_k=2, expert_intermediate=8),
        "top_k above experts": dict(experts=4, top_k=5, expert_intermediate=8, intermediate=0),
        "a dense model with top_k set": dict(top_k=2),
        "a dense model with a shared gate": dict(shared_gate=True),
    }
    for comment, change in bad.items():
        fields = dict(zip(NAMES + BOOLS, decoder_row(2, 32, 8, 2, 4, 48, 50)))
        fields.update(change)
        add(f"{comment} is rejected", ["InvalidInput"], decoder_case([tuple(fields[n] for n in NAMES + BOOLS)]),
            "invalid")
    v += invalid_vectors(decoder_case([decoder_row(2, 32, 8, 2, 4, 48, 50, tied=True, qk_norm=True, bias=True)], ()),
                         counts=NAMES, flags=BOOLS)
    v += dtype_vectors([("Qwen3-8B (8.19e9 parameters: past 2^32)", decoder_case([QWEN3_8B], ()),
                         (np.int32, np.uint32)),
                        ("a small model (every count below 256)",
                         decoder_case([decoder_row(3, 200, 8, 2, 64, 250, 255, qk_norm=True),
                                       decoder_row(2, 96, 4, 4, 32, 0, 255, experts=8, top_k=2,
                                                   expert_intermediate=200, shared_intermediate=100,
                                                   shared_gate=True)]), (np.uint8,))], NAMES)
    return v


def _random_row(rng) -> tuple:
    kv = int(rng.integers(1, 5))
    heads = kv * int(rng.integers(1, 5))
    experts = int(rng.choice([0, 0, 4, 16]))
    moe = experts > 0
    return decoder_row(int(rng.integers(0, 9)), int(rng.integers(1, 300)), heads, kv, 2 * int(rng.integers(1, 33)),
                       0 if moe else int(rng.integers(0, 500)), int(rng.integers(1, 1000)), experts=experts,
                       top_k=int(rng.integers(1, experts + 1)) if moe else 0,
                       expert_intermediate=int(rng.integers(1, 100)) if moe else 0,
                       shared_intermediate=int(rng.integers(0, 100)) if moe else 0, tied=bool(rng.integers(2)),
                       qk_norm=bool(rng.integers(2)), bias=bool(rng.integers(2)),
                       shared_gate=moe and bool(rng.integers(2)))


@st.composite
def decoder_rows(draw) -> tuple:
    kv = draw(st.integers(1, 16))
    heads = kv * draw(st.integers(1, 8))
    experts = draw(st.sampled_from([0, 0, 2, 8, 64]))
    moe = experts > 0
    big = st.integers(0, 1 << 16)
    head_dim = 2 * draw(st.integers(1, 128))  # even, as RoPE needs
    return decoder_row(draw(st.integers(0, 128)), draw(st.integers(1, 1 << 14)), heads, kv, head_dim,
                       0 if moe else draw(big), draw(st.integers(1, 1 << 18)), experts=experts,
                       top_k=draw(st.integers(1, experts)) if moe else 0,
                       expert_intermediate=draw(big) if moe else 0, shared_intermediate=draw(big) if moe else 0,
                       tied=draw(st.booleans()), qk_norm=draw(st.booleans()), bias=draw(st.booleans()),
                       shared_gate=moe and draw(st.booleans()))


def _examples(supported):
    return st.lists(decoder_rows(), min_size=0, max_size=6).map(decoder_case)


def _case_flags(case) -> tuple[str, ...]:
    """The features a drawn case exercises."""
    x = case.inputs
    found = [("GQA", np.any(x["kv_heads"] < x["heads"])), ("TiedEmbeddings", np.any(x["tied"])),
             ("QkNorm", np.any(x["qk_norm"])), ("AttentionBias", np.any(x["bias"])),
             ("ActiveExperts", np.any(x["top_k"] < x["experts"])),
             ("SharedExpert", np.any(x["shared_intermediate"] > 0))]
    return tuple(flag for flag, hit in found if hit) or ("Random",)


OPERATIONS = [
    AREA.exact("params.decoder", decoder_params, anchor="params-decoder",
               summary="parameters of a GQA decoder (int64 configs) -> (total, active) int64",
               vectors=_vectors, examples=_examples, outputs=("total", "active"),
               compare=partial(compare_parts, names=("total", "active"), comparators=(compare_exact, compare_exact)),
               case_flags=_case_flags),
]
