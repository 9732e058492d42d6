"""Public test tooling: comparators, ULP arithmetic, hypothesis strategies, golden I/O.

Kernel authors can build their own properties from these; the conformance suite
is built from them.
"""
