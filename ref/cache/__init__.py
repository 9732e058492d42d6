"""Paged KV caches and prefix caches (spec/cache.md): paged storage (slot mapping,
writing K and V by slot in the layouts engines use, FlashInfer's page table), paged
attention, a block manager with reference counts and copy-on-write, SGLang's radix
prefix cache and vLLM's hash-chained block cache."""
