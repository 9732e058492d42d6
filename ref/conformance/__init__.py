"""The catalog of operations, implementation loading and the conformance runner."""
