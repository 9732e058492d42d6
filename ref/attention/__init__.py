"""Attention: scaled dot-product attention with every mask engines use (`attend`, and
its element loop `attend_naive`), the tiled online-softmax algorithm (`flash`),
split-KV partials and their merging (`split_kv`), RoPE (`rope`, `rope_config`), MLA
and MHA2MLA (`mla`, `mha2mla`); the shared argument checks (`checks`) and every
oracle's same-precision evaluation, the bounded rule's yardstick (`emulate`)."""
