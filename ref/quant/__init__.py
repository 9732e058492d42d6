"""Weight quantization (spec/quant.md): round-to-nearest group quantization, GPTQ,
AWQ, HQQ, Hadamard rotations, the packed checkpoint layouts, quantized GEMMs, and
the codes below 4 bits with the floor they approach."""
