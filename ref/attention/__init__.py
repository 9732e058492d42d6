"""Attention: scaled dot-product attention with every mask engines use, RoPE,
the tiled online-softmax algorithm and split-KV merging, MLA and MHA2MLA."""
