"""Packed checkpoint layouts (ref.quant.packing) and the golden checkpoint files
(ref.quant.checkpoints): round trips, the word layouts bit by bit on hand-made cases,
the v1 zero points, g_idx, and a loader reading the files back."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from ref.formats import intgroup
from ref.quant import checkpoints, packing, rtn


@pytest.mark.parametrize("bits", packing.GPTQ_BITS)
def test_gptq_round_trips(bits):
    rng = np.random.default_rng(bits)
    codes = rng.integers(0, 1 << bits, (32, 64))
    qweight = packing.gptq_qweight(codes, bits=bits)
    assert qweight.shape == (64 * bits // 32, 32) and qweight.dtype == np.int32
    np.testing.assert_array_equal(packing.gptq_unpack_qweight(qweight, bits=bits), codes)
    zeros = rng.integers(0, 1 << bits, (32, 4))
    for fmt in ("v1", "v2"):
        qzeros = packing.gptq_qzeros(zeros, bits=bits, zero_format=fmt)
        assert qzeros.shape == (4, 32 * bits // 32)
        np.testing.assert_array_equal(packing.gptq_unpack_qzeros(qzeros, bits=bits, zero_format=fmt), zeros)
    v1 = packing.gptq_qzeros(zeros, bits=bits, zero_format="v1")
    np.testing.assert_array_equal(packing.gptq_repair_v1(v1, bits=bits),
                                  packing.gptq_qzeros(zeros, bits=bits, zero_format="v2"))


def test_three_bit_codes_straddle_words():
    """Code 10 of 32 takes bits 30, 31 of word 0 and bit 0 of word 1; code 21 takes bit 31
    of word 1 and bits 0, 1 of word 2 (AutoGPTQ's layout)."""
    codes = np.zeros((1, 32), np.int64)
    codes[0, 10] = 0b101
    words = packing.gptq_qweight(codes, bits=3)[:, 0].view(np.uint32)
    assert words.tolist() == [1 << 30, 1, 0]
    codes[0, 10], codes[0, 21] = 0, 0b110
    words = packing.gptq_qweight(codes, bits=3)[:, 0].view(np.uint32)
    assert words.tolist() == [0, 0, 0b11]
    codes[0, 21] = 0b001
    assert packing.gptq_qweight(codes, bits=3)[:, 0].view(np.uint32).tolist() == [0, 1 << 31, 0]


def test_four_bit_layouts_equal_intgroup():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 16, (16, 64))
    gptq_rows = intgroup.pack_int32(codes.astype(np.uint8), order="gptq")  # [16, 8] along the input axis
    np.testing.assert_array_equal(packing.gptq_qweight(codes, bits=4), gptq_rows.T)
    awq_rows = intgroup.pack_int32(np.ascontiguousarray(codes.T).astype(np.uint8), order="awq")  # along the output
    np.testing.assert_array_equal(packing.awq_pack(codes), awq_rows)


def test_awq_order_and_v1_wrap_by_hand():
    order = np.tile(np.arange(8), (1, 1)).T  # output channel c holds code c
    assert packing.awq_pack(order).view(np.uint32).tolist() == [[0x75316420]]
    zeros = np.array([[0], [15], [8], [1], [2], [3], [4], [5]])  # zero point 0 wraps to 15 in v1
    assert hex(packing.gptq_qzeros(zeros, bits=4).view(np.uint32)[0, 0]) == "0x432107ef"


def test_g_idx_orders():
    perm = np.array([3, 0, 2, 1])
    assert packing.gptq_g_idx(perm, group=2).tolist() == [0, 1, 1, 0]
    assert packing.gptq_g_idx(perm, group=2, static_groups=True).tolist() == [0, 0, 1, 1]
    assert packing.gptq_g_idx(perm, group=-1).tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("bits", range(1, 9))
def test_compressed_tensors_layouts(bits):
    rng = np.random.default_rng(bits)
    half = 1 << (bits - 1)
    v = rng.integers(-half, half, (3, 37)).astype(np.int8)
    for layout in ("dense", "padded"):
        for dim in (1, 0):
            x = v if dim == 1 else np.ascontiguousarray(v.T)
            words = packing.ct_pack(x, bits=bits, packed_dim=dim, layout=layout)
            per_row = -(-37 * bits // 32) if layout == "dense" else -(-37 // (32 // bits))
            assert words.shape == ((3, per_row) if dim == 1 else (per_row, 3))
            np.testing.assert_array_equal(packing.ct_unpack(words, bits=bits, count=37, packed_dim=dim,
                                                            layout=layout), x)
    if 32 % bits == 0:  # whole codes per word: the two layouts agree
        np.testing.assert_array_equal(packing.ct_pack(v, bits=bits), packing.ct_pack(v, bits=bits, layout="padded"))


@pytest.mark.parametrize("call, match", [
    (lambda: packing.gptq_qweight(np.zeros((2, 16), np.int64), bits=3), "codes"),
    (lambda: packing.gptq_qweight(np.full((2, 32), 16), bits=4), "codes"),
    (lambda: packing.gptq_qweight(np.zeros((2, 32), np.int64), bits=5), "bits"),
    (lambda: packing.gptq_unpack_qweight(np.zeros((4, 2), np.uint32)), "qweight"),
    (lambda: packing.gptq_g_idx(np.array([0, 0]), group=1), "perm"),
    (lambda: packing.awq_pack(np.zeros((12, 2), np.int64)), "codes"),
    (lambda: packing.ct_pack(np.int8([[8]]), bits=4), "value"),
    (lambda: packing.ct_unpack(np.zeros((1, 1), np.int32), bits=4, count=9), "count"),
    (lambda: packing.gptq_dequantize(np.zeros((8, 8), np.int32), np.zeros((2, 1), np.int32),
                                     np.ones((2, 8), np.float16), np.full(64, 2, np.int32)), "g_idx"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


def test_checkpoint_files_load_back():
    """Each layout's file, read by the safetensors reader here and dequantized by the
    loaders, gives the reference weights, which are the RTN layer's own dequantization
    with float16 scales, within a step of the float32 layer."""
    files = checkpoints.files()
    assert files == checkpoints.files()  # deterministic
    assert sum(len(b) for b in files.values()) < 100_000
    reference, meta = checkpoints.read_safetensors(files["reference.safetensors"])
    assert meta == {"layer": checkpoints.LAYER}
    w = reference["original"]
    np.testing.assert_array_equal(w, checkpoints.layer())
    for name in checkpoints.LAYOUTS:
        data = files[f"{name}/model.safetensors"]
        (n,) = struct.unpack("<Q", data[:8])
        assert n % 8 == 0 and json.loads(data[8:8 + n])["__metadata__"] == {"format": "pt"}
        tensors, _ = checkpoints.read_safetensors(data)
        config = json.loads(files[f"{name}/config.json"])["quantization_config"]
        back = checkpoints.dequantized(name, tensors, config)
        np.testing.assert_array_equal(back, reference[name])
        rows = slice(4, None) if name.endswith("_sym") else slice(None)  # GPTQ's symmetric clips rows 0..3's
        assert np.abs(back - w)[rows].max() <= np.abs(w).max() / 5  # non-negative group; else within a step
    gptq, _ = checkpoints.read_safetensors(files["gptq_v2_int4/model.safetensors"])
    c, s, z = rtn.quantize_groups(w, bits=4, group=16)
    mine = rtn.dequantize_groups(c, s.astype(np.float16).astype(np.float32), z, group=16)
    np.testing.assert_array_equal(reference["gptq_v2_int4"], mine)
    assert gptq[f"{checkpoints.LAYER}.g_idx"].tolist() == (np.arange(64) // 16).tolist()
    v1, _ = checkpoints.read_safetensors(files["gptq_v1_int4/model.safetensors"])
    zeros = packing.gptq_unpack_qzeros(v1[f"{checkpoints.LAYER}.qzeros"], bits=4)
    assert (zeros[:4, 0] == 0).all()  # the zero points a carrying v1 repair gets wrong


def test_safetensors_reader_refuses_broken_files():
    data = checkpoints.safetensors_bytes({"a": np.arange(4, dtype=np.int32)})
    with pytest.raises(ValueError, match="data"):
        checkpoints.read_safetensors(data[:-1])
    with pytest.raises(ValueError, match="data"):
        checkpoints.read_safetensors(data + b"\0")
    with pytest.raises(ValueError, match="data"):
        checkpoints.read_safetensors(data[:6])


def test_safetensors_library_reads_the_files():
    """The safetensors package (peers environment) reads the files back unchanged."""
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    for name, data in checkpoints.files().items():
        if name.endswith(".safetensors"):
            mine, _ = checkpoints.read_safetensors(data)
            theirs = safetensors_numpy.load(data)
            assert sorted(mine) == sorted(theirs)
            for key in mine:
                assert theirs[key].dtype == mine[key].dtype
                np.testing.assert_array_equal(theirs[key], mine[key])
