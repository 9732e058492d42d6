"""PyTorch's scaled_dot_product_attention (CPU) as an independent correct attention
kernel for the corpus tests: the shipped adapter, `ref.conformance.adapters.torch_sdpa`
(bottom-right masks passed explicitly, GQA by `enable_gqa`, the LSE in float32 by
`torch.logsumexp`; no sinks, no soft-capping). Imported only where torch is installed."""

from __future__ import annotations

from ref.conformance.adapters.torch_sdpa import implementation as sdpa_impl
from ref.conformance.adapters.torch_sdpa import sdpa

__all__ = ["sdpa", "sdpa_impl"]
