"""Judges, one module per kind (placeholder on this branch: the core helper owns this file)."""
