"""Speculative decoding (spec/specdec.md): rejection sampling with every random
number an input, its exact output distribution, a statistical judge for samplers
that draw their own numbers, token trees, multi-draft sampling and the speed-up
model."""
