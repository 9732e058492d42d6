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
_BRIEF_URL = "https://resources.nvidia.com/en-us-blackwell-architecture"
_BRIEF = ("NVIDIA Blackwell Architecture Technical Brief V2.1 (updated for Blackwell Ultra), Table 3: HGX B300 "
          "per-GPU column")
_BRIEF_MEM = "GPU Memory | Bandwidth: 270 GB HBM3E | 7.7 TB/s [HGX B300, per GPU]"
_MI300X_URL = "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html"
_MI300X = "AMD Instinct MI300X Accelerator, specifications and footnotes MI300-17, MI300-05A"
_MI300X_PEAKS = ("MI300-17: ... 1307.4 TFLOPS peak theoretical Bfloat16 (BF16), 2614.9 TFLOPS peak theoretical 8-bit "
                 "precision (FP8), 2614.9 TOPs INT8 ... [the dense peaks; the footnote then gives 2,614.9 TFLOPS BF16 "
                 "and 5,229.8 TFLOPS FP8 'with sparsity']")
_MI355X_URL = "https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html"
_MI355X = "AMD Instinct MI355X GPU, specifications (dense peaks; sparse ones are listed 'with structured sparsity')"
_L40S_URL = "https://www.mullet.se/product.html?product_id=355414"
_L40S = ("NVIDIA L40/L40S specifications table as reproduced on a reseller's product page (L40S column; "
         "the same table as NVIDIA's L40S datasheet)")


def _s(url: str, title: str, quote: str) -> Source:
    return Source(url=url, title=title, quote=quote)


LINK_ENTRIES = (
    ("infinity_fabric3", "128", _G, 1, True,
     _s(_MI300X_URL, _MI300X, "Infinity Fabric Links 8; Peak Infinity Fabric Link Bandwidth 128 GB/s"),
     "one AMD Infinity Fabric link of an MI300X (CDNA 3): 128 GB/s, both directions summed (AMD's page gives no "
     "direction; 7 peer links x 128 = the 896 GB/s usually quoted as an MI300X's aggregate bidirectional peer "
     "bandwidth); half, 64 GB/s, each way. A copy to one peer uses one link; to all 7 peers, 448 GB/s each way"),
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
        "flops.float4": ("14", _P, 1, False,
                         _s(_BRIEF_URL, _BRIEF, "FP4 Tensor Core 18 | 14 petaFLOPS [with sparsity | without "
                                                "sparsity]")),
        "flops.float8": ("9", _P, 1, True,
                         _s(_BRIEF_URL, _BRIEF, "FP8/FP6 Tensor Core* 9 petaFLOPS [* with sparsity: dense is half]")),
        "flops.bfloat16": ("4.5", _P, 1, True,
                           _s(_BRIEF_URL, _BRIEF, "FP16/BF16 Tensor Core* 4.5 petaFLOPS [* with sparsity: dense is "
                                                  "half]")),
        "bandwidth": ("7.7", _T, 1, False, _s(_BRIEF_URL, _BRIEF, _BRIEF_MEM)),
        "capacity": ("270", _G, 1, False, _s(_BRIEF_URL, _BRIEF, _BRIEF_MEM)),
    }, ("nvlink5", "pcie6_x16"),
        "HGX B300 (Blackwell Ultra), per GPU: 2.25 PF dense BF16, 4.5 PF dense FP8 (the B200's rates), 14 PF dense "
        "FP4 (NVIDIA prints FP4 as 'sparse | dense', 18 | 14: sparsity adds x1.29 there, not x2), 270 GB usable of "
        "the 288 GB package at 7.7 TB/s. INT8 is left out: Blackwell Ultra cuts it to about 0.3 POPS with sparsity, "
        "far below its FP8 rate. The GB300 NVL72's GPUs clock higher: NVIDIA's technical blog ("
        + _BWU_URL + ") gives '15 PetaFLOPS dense NVFP4', and 8 TB/s. Blackwell Ultra moves the host link to "
        "PCIe 6. FP4 ridge: 14e15 / 7.7e12 = 1818 FLOP/byte; FP8: 584."),
    ("MI300X", {
        "flops.bfloat16": ("1307.4", _T, 1, False, _s(_MI300X_URL, _MI300X, _MI300X_PEAKS)),
        "flops.float8": ("2614.9", _T, 1, False, _s(_MI300X_URL, _MI300X, _MI300X_PEAKS)),
        "flops.int8": ("2614.9", _T, 1, False, _s(_MI300X_URL, _MI300X, _MI300X_PEAKS)),
        "bandwidth": ("5.3", _T, 1, False, _s(_MI300X_URL, _MI300X, "Peak Memory Bandwidth 5.3 TB/s [MI300-05A: "
                                                                    "8,192 bits x 5.2 Gbps / 8 = 5.325 TB/s]")),
        "capacity": ("192", _G, 1, False, _s(_MI300X_URL, _MI300X, "Dedicated Memory Size 192 GB, Type HBM3")),
    }, ("infinity_fabric3", "pcie5_x16"),
        "AMD Instinct MI300X (CDNA 3, OAM, 750 W). AMD prints the dense peak and the one 'with structured sparsity' "
        "on separate rows (the product table rounds them to 1.3 / 2.61 PFLOPs; footnote MI300-17 gives the digits), "
        "so the dense figure is taken as printed, not halved. In an 8-GPU platform each MI300X reaches each of its 7 "
        "peers over one Infinity Fabric link (infinity_fabric3). FP8 ridge: 2614.9e12 / 5.3e12 = 493 FLOP/byte."),
    ("MI355X", {
        "flops.bfloat16": ("2.5", _P, 1, False, _s(_MI355X_URL, _MI355X, "Peak bfloat16 Performance 2.5 PFLOPs")),
        "flops.float8": ("5", _P, 1, False, _s(_MI355X_URL, _MI355X, "Peak OCP-FP8 Performance 5 PFLOPs")),
        "flops.float4": ("10.1", _P, 1, False, _s(_MI355X_URL, _MI355X, "Peak MXFP4 Performance 10.1 PFLOPs")),
        "bandwidth": ("8", _T, 1, False, _s(_MI355X_URL, _MI355X, "Peak Memory Bandwidth 8 TB/s")),
        "capacity": ("288", _G, 1, False, _s(_MI355X_URL, _MI355X, "Memory Size 288 GB HBM3E")),
    }, ("pcie5_x16",),
        "AMD Instinct MI355X (CDNA 4, liquid-cooled, 1400 W): dense peaks as AMD prints them (MXFP6 runs at the MXFP4 "
        "rate, 10.1 PF). The press figure '20.1 PFLOPS FP4/FP6' is the structured-sparsity one. Its 4th-generation "
        "Infinity Fabric is not in LINKS: no AMD page we could quote gives its per-link rate. MLPerf's system "
        "descriptions list its host link as PCIe Gen 5 x16. FP8 ridge: 5e15 / 8e12 = 625; MXFP4: 1262."),
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
