"""State-space and linear-attention layers (spec/ssm.md): layers that replace the KV
cache by a fixed-size state. Mamba-2's SSD (the recurrence, its chunked form, the
decode step, variable-length packing, the gated RMSNorm), Mamba-1's selective scan and
the causal depthwise conv1d with its rolling decode state, Gated DeltaNet (with linear
attention and the delta rule as special cases, the chunked WY form), and the bytes of
state each keeps against a KV cache. Every chunked form equals the recurrence."""
