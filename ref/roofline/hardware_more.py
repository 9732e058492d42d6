"""More entries of the hardware table (ref.roofline.hardware builds them): the
accelerators engineers plan on beyond the tour's own, written as raw data so this
module needs nothing from hardware.py.

    ENTRIES: (name, {field: (text, unit, divisor, halved, Source)}, links, notes)
    LINK_ENTRIES: (name, text, unit, divisor, halved, Source, notes)

`text` is the number as the quote prints it; the value is number(text) * unit /
divisor / (2 if halved). The conventions are hardware.py's: dense FLOP/s, decimal
bytes, links per direction. AMD prints dense and sparse figures side by side; the
dense one is taken as printed. A figure no quotable source gave is left out and the
notes say so.
"""

from __future__ import annotations

from ref.roofline.config import Source

__all__ = ["ENTRIES", "LINK_ENTRIES"]

_T, _G, _P = 1e12, 1e9, 1e15

_A100_URL = "https://www.nvidia.com/en-us/data-center/a100/"
_A100 = "NVIDIA A100 Tensor Core GPU, specifications (A100 80GB SXM column)"
_BWU_URL = "https://developer.nvidia.com/blog/inside-nvidia-blackwell-ultra-the-chip-powering-the-ai-factory-era/"
_BWU = "NVIDIA Technical Blog: Inside NVIDIA Blackwell Ultra: The Chip Powering the AI Factory Era"
_BWU_HC_URL = ("https://www.tomshardware.com/pc-components/gpus/"
               "nvidia-shares-blackwell-ultras-secrets-nvfp4-boost-detailed-and-pcie-6-0-support")
_BWU_HC = "Tom's Hardware: Nvidia shares Blackwell Ultra's secrets (Hot Chips 2025), B200 | B300 (Ultra) table"
_BWU_MEM = "Memory | 192 GB HBM3E | 288 GB HBM3E ... Memory Bandwidth | 8 TB/s | 8 TB/s [B200 | B300 (Ultra)]"
_MI300X_URL = ("https://raw.githubusercontent.com/alpharomercoma/MI300X-vs-H200/"
               "6077fdc7bfc215171c33435b7cd76ca4c5f2b236/METHODOLOGY.md")
_MI300X = "MI300X vs H200, METHODOLOGY.md: the specification table (MI300X | H200 columns, the vendors' dense peaks)"
_MI355X_URL = ("https://www.tomshardware.com/pc-components/gpus/"
               "amds-instinct-mi355x-accelerator-will-consume-1-400-watts")
_MI355X = "Tom's Hardware: AMD's Instinct MI355X accelerator will reportedly consume 1,400 watts (ISC 2025)"
_MI355X_MEM = "Both SKUs will come with 288GB HBM3E memory that will offer up to 8 TB/s of bandwidth [MI350X, MI355X]"
_L40S_URL = "https://www.mullet.se/product.html?product_id=355414"
_L40S = ("NVIDIA L40/L40S specifications table as reproduced on a reseller's product page (L40S column; "
         "the same table as NVIDIA's L40S datasheet)")


def _s(url: str, title: str, quote: str) -> Source:
    return Source(url=url, title=title, quote=quote)


LINK_ENTRIES = (
    ("nvlink3", "600", _G, 1, True,
     _s(_A100_URL, _A100, "Interconnect: NVIDIA NVLink: 600GB/s PCIe Gen4: 64GB/s"),
     "third-generation NVLink (A100): 600 GB/s per GPU, both directions summed; half each way"),
)

ENTRIES = (
    ("A100", {
        "flops.bfloat16": ("312", _T, 1, False,
                           _s(_A100_URL, _A100, "BFLOAT16 Tensor Core 312 TFLOPS | 624 TFLOPS* [dense | '* With "
                                                "sparsity']")),
        "flops.int8": ("624", _T, 1, False,
                       _s(_A100_URL, _A100, "INT8 Tensor Core 624 TOPS | 1248 TOPS* [dense | '* With sparsity']")),
        "bandwidth": ("2,039", _G, 1, False,
                      _s(_A100_URL, _A100, "GPU Memory Bandwidth 1,935GB/s | 2,039GB/s [A100 80GB PCIe | A100 80GB "
                                           "SXM]")),
        "capacity": ("80", _G, 1, False, _s(_A100_URL, _A100, "GPU Memory 80GB HBM2e")),
    }, ("nvlink3", "pcie4_x16"),
        "A100 SXM 80GB (Ampere). The page prints the dense figure first and the sparse one starred, so the dense "
        "figure is taken as printed. Ampere has no FP8 Tensor Cores: no float8 entry (FP8 runs as BF16/INT8). "
        "BF16 ridge: 312e12 / 2.039e12 = 153 FLOP/byte."),
    ("B300", {
        "flops.float4": ("15", _P, 1, False,
                         _s(_BWU_URL, _BWU, "640 fifth-generation Tensor Cores with 15 PetaFLOPS dense NVFP4 "
                                            "compute")),
        "bandwidth": ("8", _T, 1, False, _s(_BWU_HC_URL, _BWU_HC, _BWU_MEM)),
        "capacity": ("288", _G, 1, False, _s(_BWU_HC_URL, _BWU_HC, _BWU_MEM)),
    }, ("nvlink5", "pcie6_x16"),
        "Blackwell Ultra (the B300 / GB300 GPU): 15 PF dense NVFP4 from NVIDIA's technical blog; 288 GB of "
        "HBM3e at 8 TB/s from the Hot Chips 2025 table. Dense BF16 and FP8 are left out: no NVIDIA page we could "
        "quote gives them per GPU (third-party tables give 2.25-2.5 PF BF16 and 4.5-5 PF FP8 dense; the Hot Chips "
        "table's 10 / 5 PF do not say dense or sparse), and an HGX B300 board may run below the GB300's clocks. "
        "Blackwell Ultra moves the host link to PCIe 6. FP4 ridge: 15e15 / 8e12 = 1875 FLOP/byte."),
    ("MI300X", {
        "flops.bfloat16": ("1307.4", _T, 1, False,
                           _s(_MI300X_URL, _MI300X, "| BF16 dense | 1307.4 TFLOP/s | 989.4 TFLOP/s |")),
        "flops.float8": ("2614.9", _T, 1, False,
                         _s(_MI300X_URL, _MI300X, "| FP8 dense | 2614.9 TFLOP/s | 1978.9 TFLOP/s |")),
        "bandwidth": ("5.3", _T, 1, False, _s(_MI300X_URL, _MI300X, "| HBM bandwidth | 5.3 TB/s | 4.8 TB/s |")),
        "capacity": ("192", _G, 1, False, _s(_MI300X_URL, _MI300X, "| Memory capacity | 192 GB | 141 GB |")),
    }, ("pcie5_x16",),
        "AMD Instinct MI300X (CDNA 3, OAM). AMD prints the dense peak and the 'with structured sparsity' peak on "
        "separate rows; the table quoted restates the dense ones (its H200 column is the H200's dense 989.4 / "
        "1978.9, NVIDIA's sparse figures halved), so nothing is halved here. amd.com's page could not be quoted here; "
        "check it before relying on the digits. Its 8-GPU Infinity Fabric mesh (7 links a GPU) is not in LINKS: "
        "no quotable AMD source gave the per-link rate and its direction. FP8 ridge: 2614.9e12 / 5.3e12 = 493."),
    ("MI355X", {
        "bandwidth": ("8", _T, 1, False, _s(_MI355X_URL, _MI355X, _MI355X_MEM)),
        "capacity": ("288", _G, 1, False, _s(_MI355X_URL, _MI355X, _MI355X_MEM)),
    }, ("pcie5_x16",),
        "AMD Instinct MI355X (CDNA 4, liquid-cooled, 1400 W). Memory and bandwidth only: no AMD page we could quote "
        "gave the dense BF16 / FP8 / MXFP4 peaks, and the press figure '20.1 PFLOPS FP4/FP6' does not say whether it "
        "is dense or sparse, so flops is empty (as for the M3 Ultra) until a quotable AMD source is added. Its "
        "Infinity Fabric is not in LINKS (no quotable per-direction rate). MLPerf's system descriptions list its "
        "host link as PCIe Gen 5 x16."),
    ("L40S", {
        "flops.bfloat16": ("362.05", _T, 1, False,
                           _s(_L40S_URL, _L40S, "BFLOAT16 Tensor Core TFLOPS | 181.05 | 362.1* | 362.05 | 733* "
                                                "[L40 dense | sparse | L40S dense | sparse; '* With Sparsity']")),
        "flops.float8": ("733", _T, 1, False,
                         _s(_L40S_URL, _L40S, "FP8 Tensor Core | 362 | 724* | 733 | 1,466* [L40 dense | sparse | "
                                              "L40S dense | sparse; '* With Sparsity']")),
        "bandwidth": ("864", _G, 1, False, _s(_L40S_URL, _L40S, "Memory Bandwidth | 864GB/s")),
        "capacity": ("48", _G, 1, False, _s(_L40S_URL, _L40S, "GPU Memory | 48 GB GDDR6 with ECC")),
    }, ("pcie4_x16",),
        "NVIDIA L40S (Ada Lovelace, PCIe card, no NVLink). The table prints dense and starred sparse figures; the "
        "dense ones are taken as printed. FP8 ridge: 733e12 / 864e9 = 848 FLOP/byte. The figures are read from a "
        "reseller's copy of NVIDIA's table (nvidia.com's L40S page carries the same rows)."),
)
