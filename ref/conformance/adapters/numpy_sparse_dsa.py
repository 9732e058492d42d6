"""Sparse attention (dsa) for the default run, written independently of the oracles
(this module imports nothing from ref)."""

from __future__ import annotations

import numpy as np

NAME = "NumPy DSA indexer and sparse attention"
VERSION = np.__version__

OPS: dict = {}
VARIANTS: dict = {}
