"""Sloane's library of small Hadamard matrices as compressed-tensors ships it
(`compressed_tensors/transform/utils/hadamards.safetensors`, 0.19.0: 66 int8
matrices, every multiple of 4 up to 256 plus 1 and 2), each rebuilt from a
construction of `ref.quant.hadamard_constructions` with its rows as data where the
construction needs them (spec/quant.md#hadamard-matrices). The file's metadata names
each entry after Sloane's file (had.K.pal, .pal2, .tpal, .will, .twill, .tur, .od,
.syl, .hall.n); the tests hold the SHA-256 of every upstream matrix.

  syl, 2..16              Sylvester's natural order
  pal                     paley1(K - 1) up to 200; paley1_normalized(K - 1) from 212
  pal2                    paley2(K / 2 - 1)
  tpal, tpal2, ttpal...   sylvester(the file's own K / 2), but 40 = sylvester(paley1(19))
  will                    williamson(rows)                  (52, 92, 100, 116, 156, 172, 244)
  twill                   sylvester(williamson(rows, layout="second")), 208 twice
  tur (188), od (236)     goethals_seidel(rows)
  hall.n (20)             the matrix itself, as rows
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ref.arguments import integer
from ref.quant.hadamard_constructions import goethals_seidel, paley1, paley1_normalized, paley2, sylvester, williamson

__all__ = ["COMPRESSED_TENSORS_ORDERS", "SLOANE_WILLIAMSON", "compressed_tensors_hadamard"]

COMPRESSED_TENSORS_ORDERS = (1, 2) + tuple(range(4, 257, 4))
_PALEY1 = (12, 24, 32, 44, 48, 60, 68, 72, 80, 84, 104, 108, 132, 140, 152, 164, 168, 180, 192, 200)
_PALEY1_NORMALIZED = (212, 224, 228, 240, 252)
_PALEY2 = (28, 36, 76, 124, 148, 196, 204, 220)
_DOUBLED = (56, 88, 96, 112, 120, 136, 144, 160, 176, 184, 216)  # sylvester(the file's K / 2)
_SYLVESTER = (1, 2, 4, 8, 16, 64, 128, 256)

# Sloane's had.52.will, had.156.will, had.172.will: the first rows of Williamson's A, B,
# C, D, read off QuaRot's get_had52/156/172 (SpinQuant and compressed-tensors ship the
# same bytes), whose 16 blocks are each circulant and symmetric.
SLOANE_WILLIAMSON = {
    52: ("+-+--++++--+-", "+---++++++---", "++-+--++--+-+", "+----+--+----"),
    156: ("+++--+-+-----+--++----++--+-----+-+--++", "++++---+--++----+-+--+-+----++--+---+++",
          "+++--++-+---+-+--+----+--+-+---+-++--++", "+---++-+-+-----+++-++-+++-----+-+-++---"),
    172: ("+---++--++++-+-+++-++--++-+++-+-++++--++---", "++-++++++----+-+--++-++-++--+-+----++++++-+",
          "+++-+-++--+-+-++++-+----+-++++-+-+--++-+-++", "++---++++-+--+--++--------++--+--+-++++---+"),
}

# The other arrays' first rows of A, B, C, D, read off compressed-tensors' matrices (every
# block circulant, or back-circulant where goethals_seidel puts R): (kind, doublings, rows).
_ROWS = {
    92: ("will", 0, (
        "+++-+++-+------+-+++-++",
        "+++---++-+-++-+-++---++",
        "+-++-++--++++++--++-++-",
        "++---+---+-++-+---+---+",
    )),
    100: ("will", 0, (
        "+-++++----++--++----++++-",
        "+++-+++---+-++-+---+++-++",
        "+-++-+++-++----++-+++-++-",
        "+--++-+-+--------+-+-++--",
    )),
    116: ("will", 0, (
        "++--+--+-+++-++++-+++-+--+--+",
        "++++-++-+---++++++---+-++-+++",
        "+-+---++--+-++++++-+--++---+-",
        "+++---++--+-+----+-+--++---++",
    )),
    244: ("will", 0, (
        "++--+--++--+-+-++++--+-----+------+-----+--++++-+-+--++--+--+",
        "++--+--++--+-+-++++--+-----+------+-----+--++++-+-+--++--+--+",
        "+---+-+-++++---++--+-++-+---++++++---+-++-+--++---++++-+-+---",
        "++++-+-+----+++--++-+--+-+++------+++-+--+-++--+++----+-+-+++",
    )),
    188: ("gs", 0, (
        "+-+----+--+----++---++++---+-+----++++++--+---+",
        "-+-++++-++-++++--+++---+---+-+----++++++--+---+",
        "+---+--+-+-+++-++-+--++---+---+-----+++-+--+--+",
        "-+++-++-+-+---+--+-++-----+---+-----+++-+--+--+",
    )),
    236: ("gs", 0, (
        "+++++-++++-+--++--++++-+---+-++++-+---+-++---+--++++-++++--",
        "-++++-++++-+--++--++++-+---+-++-++++-++++--+---++-+---+-++-",
        "-----+----+-++--++----+-+++-+-+++-+---+-++---+--++++-++++--",
        "-++++-++++-+--++--++++-+---+-+-+----+----++-+++--+-+++-+--+",
    )),
    208: ("twill", 2, (
        "+-+--++++--+-",
        "-+++------+++",
        "--+-++--++-+-",
        "-++++-++-++++",
    )),
    232: ("twill", 1, (
        "++--+--+-+++-++++-+++-+--+--+",
        "----+--+-+++------+++-+--+---",
        "-+-+++--++-+------+-++--+++-+",
        "---+++--++-+-++++-+-++--+++--",
    )),
    248: ("twill", 1, (
        "+--+++-+--+----++----+--+-+++--",
        "-++---+-++-++++--++++-++-+---++",
        "-+++++---+-+-++--++-+-+---+++++",
        "------+++-+-+--++--+-+-+++-----",
    )),
}
_HALL_20 = (  # had.20.hall.n: Hall's matrix, not a Paley or Williamson one
    "++++++++++++++++++++",
    "++++++++++----------",
    "+++++-----+++++-----",
    "+-----++++-+++++----",
    "++---+++--+++---++--",
    "+-+--+++--+--++---++",
    "+--+-+--+++++-----++",
    "+---++--+++--++-++--",
    "--++-++-+-++-+-++---",
    "--++-+-+-++-+-++-+--",
    "-+--+++-+-+-+-++--+-",
    "-+--++-+-+++-+-+---+",
    "--+-+++--+-+++---++-",
    "--+-++-++--++-+-+--+",
    "-+-+-+-++--+-++--++-",
    "-+-+-++--+--+++-+--+",
    "---++-+++-+-++---+-+",
    "---++-++-+++--+-+-+-",
    "-++---+-++++--+--+-+",
    "-++----++++-++--+-+-",
)


def _signs(rows) -> list[NDArray[np.int64]]:
    return [np.array([1 if c == "+" else -1 for c in row], np.int64) for row in rows]


def compressed_tensors_hadamard(k: int) -> NDArray[np.int64]:
    """The matrix of order k in compressed-tensors' hadamards.safetensors, entries +-1."""
    k = integer(k, "k")
    if k not in COMPRESSED_TENSORS_ORDERS:
        raise ValueError(f"k: expected 1, 2 or a multiple of 4 up to 256 (compressed_tensors), got {k}")
    if k in _SYLVESTER:
        h = np.ones((1, 1), np.int64)
        while h.shape[0] < k:
            h = sylvester(h)
        return h
    if k in _PALEY1:
        return paley1(k - 1)
    if k in _PALEY1_NORMALIZED:
        return paley1_normalized(k - 1)
    if k in _PALEY2:
        return paley2(k // 2 - 1)
    if k == 40:
        return sylvester(paley1(19))
    if k in _DOUBLED:
        return sylvester(compressed_tensors_hadamard(k // 2))
    if k == 20:
        return np.stack(_signs(_HALL_20))
    if k in SLOANE_WILLIAMSON:
        return williamson(*_signs(SLOANE_WILLIAMSON[k]))
    kind, times, rows = _ROWS[k]
    h = goethals_seidel(*_signs(rows)) if kind == "gs" else williamson(
        *_signs(rows), layout="second" if kind == "twill" else "first")
    for _ in range(times):
        h = sylvester(h)
    return h
