"""Attention: scaled dot-product attention with every mask engines use (`attend`,
`attend_varlen`, and the element loop `attend_naive`), the tiled online-softmax
algorithm (`attend_tiled`), split-KV partials and their merging (`attend_split`,
`merge_states`), RoPE (`apply_rope`), MLA (`mla_naive`, `mla_absorbed`,
`flashmla_attend`) and MHA2MLA conversion (the `mha2mla` module).

The functions are exported here (`ref.attention.attend(q, k, v)`); their modules
stay importable by path (`ref.attention.attend` names the function, so import the
module's other names as `from ref.attention.attend import SinkInLse`). The shared
argument checks are in `checks`, every oracle's same-precision evaluation (the
bounded rule's yardstick) in `emulate`, RoPE's configuration reading in `rope_config`.
"""

from ref.attention.attend import LseBase, MaskedLse, SinkInLse, attend, attend_varlen
from ref.attention.attend_naive import attend_naive
from ref.attention.flash import attend_tiled
from ref.attention.mla import flashmla_attend, mla_absorbed, mla_naive
from ref.attention.rope import AttentionFactor, MscaleKeys, RopeStyle, apply_rope
from ref.attention.split_kv import attend_split, merge_states, merge_states_many

__all__ = [
    "AttentionFactor",
    "LseBase",
    "MaskedLse",
    "MscaleKeys",
    "RopeStyle",
    "SinkInLse",
    "apply_rope",
    "attend",
    "attend_naive",
    "attend_split",
    "attend_tiled",
    "attend_varlen",
    "flashmla_attend",
    "merge_states",
    "merge_states_many",
    "mla_absorbed",
    "mla_naive",
]
