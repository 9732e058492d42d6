"""Sparse attention (spec/sparse.md): attention that keeps the whole KV cache but reads
a small part of it. Block-sparse attention over given key blocks, NSA's compressed,
selected and sliding-window branches, MoBA's chunk gating, DeepSeek's sparse attention
(the lightning indexer and its top-k), and the bytes each reads per decode step. Every
selection is exact (indices as sets, ties ruled), and the attention over a selection
equals masked dense attention (`ref.attention.attend`)."""
