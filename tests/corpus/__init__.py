"""Implementations the conformance suite is tested against: independent correct ones
(must pass) and plausible wrong kernels (must be rejected, naming a vector)."""
