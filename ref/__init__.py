"""llm-ref: engine-neutral NumPy reference oracles for fast LLM inference.

Oracles live in one module per technique, grouped by area (`ref.formats`, ...);
`ref.testing` holds comparators, strategies and golden-vector I/O; `ref.conformance`
holds the catalog of operations and the runner that checks any implementation
against them. `python -m ref --help` lists the commands.
"""

__version__ = "0.1.0"
