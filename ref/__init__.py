"""llm-ref: engine-neutral NumPy reference oracles for fast LLM inference.

Oracles live in one module per technique, grouped by area; each area package exports
its functions (`ref.formats.encode`, `ref.attention.attend`). `ref.testing` holds
comparators, strategies and golden-vector I/O; `ref.conformance` holds the catalog
of operations and the runner that checks any implementation against them.
`python -m ref --help` (or `llm-ref --help`) lists the commands; `python -m ref spec`
prints the spec pages the package ships.
"""

__version__ = "0.1.0"
