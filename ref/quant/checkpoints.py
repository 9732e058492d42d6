"""Golden packed checkpoints: one small linear layer quantized by round-to-nearest and
written in each layout weight-only checkpoints use (GPTQ v1 and v2, 3-bit act-order
GPTQ, 8-bit symmetric GPTQ, AWQ, compressed-tensors' pack-quantized), as safetensors
files a loader can be checked against, with the dequantized weights each must give.

safetensors, written here with the standard library and NumPy: an 8-byte little-endian
header length N, N bytes of JSON ({name: {"dtype", "shape", "data_offsets": [begin,
end]}, "__metadata__": {...}}, padded with spaces to a multiple of 8), then the raw
little-endian bytes of every tensor. Deterministic: tensors in name order, keys
sorted, no whitespace in the JSON.

`files()` -> {relative name: bytes}: per layout `<layout>/model.safetensors` and
`<layout>/config.json` (the quantization config the library writes beside it), and
`reference.safetensors` (the float32 layer and each layout's dequantized weights).
"""

from __future__ import annotations

import json
import struct

import numpy as np
from numpy.typing import NDArray

from ref.quant import packing, rtn

__all__ = ["DTYPES", "LAYER", "LAYOUTS", "dequantized", "files", "layer", "read_safetensors", "safetensors_bytes"]

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
          "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
LAYER = "model.layers.0.mlp.down_proj"
OUT, IN, GROUP = 32, 64, 16  # 3-bit GPTQ needs 32 | out and 32 | in
LAYOUTS = ("gptq_v1_int4", "gptq_v2_int4", "gptq_v1_int3_act_order", "gptq_v1_int8_sym", "awq_int4",
           "compressed_tensors_int4_sym")


def safetensors_bytes(tensors: dict[str, NDArray], metadata: dict[str, str] | None = None) -> bytes:
    """The safetensors file of `tensors` (name -> array of a DTYPES type)."""
    names = {v: k for k, v in DTYPES.items()}
    header: dict = {"__metadata__": dict(metadata)} if metadata else {}
    chunks, offset = [], 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name])
        if arr.dtype.type not in names:
            raise TypeError(f"tensors[{name!r}]: no safetensors dtype for {arr.dtype}")
        data = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": names[arr.dtype.type], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def read_safetensors(data: bytes) -> tuple[dict[str, NDArray], dict[str, str]]:
    """(tensors, metadata) of a safetensors file; every tensor's bytes checked to lie
    inside the buffer, back to back."""
    if len(data) < 8:
        raise ValueError("data: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"data: header of {n} bytes runs past the end ({len(data)} bytes)")
    header = json.loads(data[8:8 + n].decode())
    body = data[8 + n:]
    metadata = header.pop("__metadata__", {}) or {}
    tensors, end = {}, 0
    for name, entry in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, stop = entry["data_offsets"]
        dtype = np.dtype(DTYPES[entry["dtype"]]).newbyteorder("<")
        if begin != end or stop > len(body) or (stop - begin) != dtype.itemsize * int(np.prod(entry["shape"])):
            raise ValueError(f"{name}: data_offsets {entry['data_offsets']} are not the next {entry['shape']} "
                             f"{entry['dtype']} bytes")
        tensors[name] = np.frombuffer(body[begin:stop], dtype=dtype).reshape(entry["shape"]).astype(dtype.type)
        end = stop
    if end != len(body):
        raise ValueError(f"data: {len(body) - end} bytes after the last tensor")
    return tensors, metadata


def layer() -> NDArray[np.float32]:
    """The layer w [32, 64]: integers in [-64, 64] times 2^-9 with input channel 3 eight
    times larger (an outlier channel), from a fixed seed; the first group of rows 0..3
    has no negative weight, so its zero point is 0 (stored as 2^b - 1 in v1 files: a
    loader that repairs v1 by adding one per word carries out of that field)."""
    rng = np.random.default_rng(14)
    w = rng.integers(-64, 65, (OUT, IN)).astype(np.float64) * 2.0**-9
    w[:, 3] *= 8
    w[:4, :GROUP] = np.abs(w[:4, :GROUP])
    return w.astype(np.float32)


def _grouped(w, bits: int, scheme: str, order: NDArray):
    """RTN codes [out, in], zero points [out, G], float16 scales [G, out] with the groups
    of GROUP consecutive columns of `order` (the quantization order)."""
    c, s, z = rtn.quantize_groups(w[:, order], bits=bits, group=GROUP, scheme=scheme)
    codes = np.empty_like(c)
    codes[:, order] = c
    return codes, z.astype(np.int64), s.T.astype(np.float16)


def _gptq(bits: int, fmt: str, act_order: bool, scheme: str):
    w = layer()
    perm = np.argsort(-np.abs(w).sum(axis=0), kind="stable") if act_order else np.arange(IN)
    codes, zeros, scales = _grouped(w, bits, scheme, perm)
    g_idx = packing.gptq_g_idx(perm, group=GROUP)
    tensors = {f"{LAYER}.qweight": packing.gptq_qweight(codes, bits=bits),
               f"{LAYER}.qzeros": packing.gptq_qzeros(zeros, bits=bits, zero_format=fmt),
               f"{LAYER}.scales": scales, f"{LAYER}.g_idx": g_idx}
    config = {"bits": bits, "group_size": GROUP, "desc_act": act_order, "static_groups": False,
              "sym": scheme != "asymmetric", "checkpoint_format": "gptq" if fmt == "v1" else "gptq_v2",
              "quant_method": "gptq"}
    return tensors, config


def _awq():
    codes, zeros, scales = _grouped(layer(), 4, "asymmetric", np.arange(IN))
    tensors = {f"{LAYER}.qweight": packing.awq_pack(codes), f"{LAYER}.qzeros": packing.awq_pack(zeros),
               f"{LAYER}.scales": scales}
    config = {"quant_method": "awq", "bits": 4, "group_size": GROUP, "zero_point": True, "version": "gemm"}
    return tensors, config


def _compressed_tensors():
    codes, _, scales = _grouped(layer(), 4, "symmetric_compressed_tensors", np.arange(IN))
    tensors = {f"{LAYER}.weight_packed": packing.ct_pack((codes - 8).astype(np.int8), bits=4),
               f"{LAYER}.weight_scale": np.ascontiguousarray(scales.T),  # [out, G]
               f"{LAYER}.weight_shape": np.array([OUT, IN], np.int64)}
    config = {"quant_method": "compressed-tensors", "format": "pack-quantized",
              "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                  "num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": GROUP}}}}
    return tensors, config


def _build(name: str):
    return {"gptq_v1_int4": lambda: _gptq(4, "v1", False, "asymmetric"),
            "gptq_v2_int4": lambda: _gptq(4, "v2", False, "asymmetric"),
            "gptq_v1_int3_act_order": lambda: _gptq(3, "v1", True, "asymmetric"),
            "gptq_v1_int8_sym": lambda: _gptq(8, "v1", False, "symmetric"),
            "awq_int4": _awq, "compressed_tensors_int4_sym": _compressed_tensors}[name]()


def dequantized(name: str, tensors: dict[str, NDArray], config: dict) -> NDArray[np.float32]:
    """The float32 weights [out, in] a loader must read from one layout's tensors."""
    t = {k.rsplit(".", 1)[1]: v for k, v in tensors.items()}
    if config["quant_method"] == "gptq":
        fmt = "v1" if config["checkpoint_format"] == "gptq" else "v2"
        return packing.gptq_dequantize(t["qweight"], t["qzeros"], t["scales"], t["g_idx"], bits=config["bits"],
                                       zero_format=fmt)
    if config["quant_method"] == "awq":
        return packing.awq_dequantize(t["qweight"], t["qzeros"], t["scales"], group=config["group_size"])
    out, inp = (int(x) for x in t["weight_shape"])
    codes = packing.ct_unpack(t["weight_packed"], bits=4, count=inp).astype(np.int64)  # signed
    group = config["config_groups"]["group_0"]["weights"]["group_size"]
    scale = np.repeat(t["weight_scale"].astype(np.float32), group, axis=1)  # [out, in]
    return (scale * codes.astype(np.float32)).astype(np.float32)


def files() -> dict[str, bytes]:
    """Every golden checkpoint file, by relative name."""
    out, reference = {}, {"original": layer()}
    for name in LAYOUTS:
        tensors, config = _build(name)
        out[f"{name}/model.safetensors"] = safetensors_bytes(tensors, {"format": "pt"})
        out[f"{name}/config.json"] = (json.dumps({"quantization_config": config}, sort_keys=True, indent=2)
                                      + "\n").encode()
        reference[name] = dequantized(name, tensors, config)
    out["reference.safetensors"] = safetensors_bytes(reference, {"layer": LAYER})
    return out
