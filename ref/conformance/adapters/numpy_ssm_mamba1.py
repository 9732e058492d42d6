"""Mamba-1 selective scan and causal conv1d (spec/ssm.md) for the default run, written independently of the oracles
(this module imports nothing from ref)."""

from __future__ import annotations

import numpy as np

NAME = "NumPy Mamba-1 selective scan and causal conv1d"
VERSION = np.__version__

OPS: dict = {}
VARIANTS: dict = {}
