"""The quant area's catalog: gathers each technique module's OPERATIONS and FLAGS, and
the packed checkpoint files golden/quant/checkpoints/ holds (`FILES`)."""

from ref.quant import checkpoints
from ref.quant.catalog import awq, gptq, hadamard, hqq, lattice, packing, rtn
from ref.testing.catalog_types import gather
from ref.testing.flags import COMMON

MODULES = (rtn, packing, gptq, awq, hqq, hadamard, lattice)

OPERATIONS, FLAGS = gather("quant", MODULES, COMMON)


def FILES() -> dict[str, bytes]:  # noqa: N802 (the catalog packages' name for extra golden files)
    """The packed checkpoints (ref.quant.checkpoints.files), under checkpoints/."""
    return {f"checkpoints/{name}": data for name, data in checkpoints.files().items()}
