"""KV-cache quantization (spec/kv.md): KIVI's per-channel keys and per-token values
with a full-precision residual window, QJL's 1-bit sign sketches, TurboQuant's
rotated Lloyd-Max codes, OSCAR's attention-aware rotations for INT2, and attention
over the quantized cache."""
