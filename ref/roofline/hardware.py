"""The hardware table: dense peak FLOP/s per number format, memory bandwidth, memory
capacity and interconnect of the accelerators the tour names, each figure with the
words of its source.

    HARDWARE[name] -> Hardware(name, flops, bandwidth, capacity, links, sources, notes)
    LINKS[name]    -> Link(name, bytes_per_s, source)      bytes_per_s: ONE direction
    MEASURED[key]  -> Measurement(...)                     published throughput runs

Conventions (read these before comparing with a vendor page):
  - flops are DENSE peaks in FLOP/s, keyed "bfloat16", "float8", "float4", "int8" (int8
    in OP/s). NVIDIA prints Tensor Core figures "with sparsity" (2:4 structured
    sparsity doubles the count); where a source is sparse the entry is written as the
    printed figure / 2, and the quote says so.
  - system figures (a DGX of 8, a rack of 72) are divided by the GPU count in the entry
    itself (72e15 / 8 / 2), so the arithmetic from the quoted number is on the page.
  - bandwidth and capacity are decimal bytes (TB/s = 1e12 B/s, GB = 1e9 B), as vendors
    print them.
  - a link's bytes_per_s is per direction; NVIDIA's NVLink and PCIe figures are the sum
    of both directions, so they are halved; NIC line rates (Gb/s) are per direction.
  - "announced" entries (R200) carry preliminary figures, as announced.
The tour's machines are written below; the further ones engineers plan on (A100, B300,
MI300X, MI355X, L40S) and their links are raw data in ref.roofline.hardware_more,
built here with the same Figure arithmetic.
Users add their own entries: Hardware(...) with a Source per numeric field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ref.roofline.config import Source
from ref.roofline.hardware_more import ENTRIES, LINK_ENTRIES

__all__ = ["FIGURES", "FLOP_FORMATS", "HARDWARE", "LINKS", "MEASURED", "Figure", "Hardware", "Link", "Measurement"]

FLOP_FORMATS = ("bfloat16", "float8", "float4", "int8")


def _positive_number(owner: str, name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{owner}.{name}: expected a number, got {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{owner}.{name}: expected a finite number > 0, got {value!r}")


@dataclass(frozen=True)
class Link:
    """An interconnect: bytes per second in ONE direction, with its source."""

    name: str
    bytes_per_s: float
    source: Source
    notes: str = ""

    def __post_init__(self):
        _positive_number(f"Link {self.name}", "bytes_per_s", self.bytes_per_s)


@dataclass(frozen=True)
class Hardware:
    """One accelerator (per GPU for multi-GPU systems). sources maps each numeric field
    to its Source: "bandwidth", "capacity", "flops.<format>" for each flops key."""

    name: str
    flops: dict
    bandwidth: float
    capacity: float
    links: tuple = ()
    sources: dict = field(default_factory=dict)
    notes: str = ""
    status: str = "shipping"  # or "announced"

    def __post_init__(self):
        owner = f"Hardware {self.name}"
        if not isinstance(self.flops, dict):
            raise TypeError(f"{owner}.flops: expected a dict format -> FLOP/s, got {type(self.flops).__name__}")
        for fmt, value in self.flops.items():
            if fmt not in FLOP_FORMATS:
                raise ValueError(f"{owner}.flops: expected keys among {FLOP_FORMATS}, got {fmt!r}")
            _positive_number(owner, f"flops[{fmt!r}]", value)
        _positive_number(owner, "bandwidth", self.bandwidth)
        _positive_number(owner, "capacity", self.capacity)
        if self.status not in ("shipping", "announced"):
            raise ValueError(f"{owner}.status: expected 'shipping' or 'announced', got {self.status!r}")
        object.__setattr__(self, "links", tuple(self.links))

    def numeric_fields(self) -> tuple[str, ...]:
        """The names sources must cover: bandwidth, capacity, flops.<format>..."""
        return ("bandwidth", "capacity", *(f"flops.{fmt}" for fmt in self.flops))

    def missing_sources(self) -> list[str]:
        return [f for f in self.numeric_fields() if not isinstance(self.sources.get(f), Source)]


@dataclass(frozen=True)
class Measurement:
    """A published throughput run: tokens per second of prefill and of decode."""

    hardware: str
    model: str
    precision: str
    engine: str
    batch: int
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    source: Source
    notes: str = ""


@dataclass(frozen=True)
class Figure:
    """How a table entry comes from its quote: the number as printed (text, found
    verbatim in the quote), its unit in base units, the count it is shared by (GPUs in
    a system) and whether it is halved (a sparse FLOP/s figure, or a link's
    both-directions sum). value = number(text) * unit / divisor / (2 if halved)."""

    text: str
    unit: float
    divisor: int = 1
    halved: bool = False

    @property
    def value(self) -> float:
        return float(self.text.replace(",", "")) * self.unit / self.divisor / (2 if self.halved else 1)


T, G, P = 1e12, 1e9, 1e15
_F = Figure
# FIGURES[hardware or link name][field] -> Figure: the derivation of every number below.
FIGURES: dict[str, dict[str, Figure]] = {}


def _s(url: str, title: str, quote: str) -> Source:
    return Source(url=url, title=title, quote=quote)


def _sparse(text: str, unit: float, url: str, title: str, quote: str, divisor: int = 1) -> tuple:
    """A Tensor Core figure printed with sparsity: (Figure halved, Source with the note)."""
    return _F(text, unit, divisor=divisor, halved=True), _s(url, title, quote + _SPARSE)


def _link(name: str, fig: Figure, source: Source, notes: str) -> Link:
    FIGURES[name] = {"bytes_per_s": fig}
    return Link(name, fig.value, source, notes)


def _hw(name: str, entries: dict, links: tuple, notes: str, status: str = "shipping") -> Hardware:
    """entries: field ("bandwidth", "capacity", "flops.<fmt>") -> (Figure, Source)."""
    FIGURES[name] = {f: fig for f, (fig, _) in entries.items()}
    flops = {f.split(".", 1)[1]: fig.value for f, (fig, _) in entries.items() if f.startswith("flops.")}
    return Hardware(name, flops, entries["bandwidth"][0].value, entries["capacity"][0].value, links,
                    {f: src for f, (_, src) in entries.items()}, notes, status)


_H100_URL = "https://www.nvidia.com/en-us/data-center/h100/"
_H200_URL = "https://www.nvidia.com/en-us/data-center/h200/"
_DGX_B200_URL = "https://www.nvidia.com/en-us/data-center/dgx-b200/"
_NVL72_URL = "https://www.nvidia.com/en-us/data-center/gb200-nvl72/"
_RUBIN_URL = "https://www.nvidia.com/en-us/data-center/vera-rubin-nvl72/"
_MAC_URL = "https://support.apple.com/en-us/122211"
_MAC = "Apple Support: Mac Studio (2025) - Tech Specs"
_RTX5090_URL = "https://www.nvidia.com/en-us/geforce/graphics-cards/50-series/rtx-5090/"
_LMSYS_URL = "https://lmsys.org/blog/2025-10-13-nvidia-dgx-spark/"
_SPARK_URL = "https://developer.nvidia.com/zh-cn/blog/how-nvidia-dgx-sparks-performance-enables-intensive-ai-tasks/"
_H100 = "NVIDIA H100 Tensor Core GPU, specifications (H100 SXM column)"
_H200 = "NVIDIA H200 Tensor Core GPU, specifications (H200 SXM column)"
_DGX = "NVIDIA DGX B200, specifications (a system of 8 GPUs)"
_NVL72 = "NVIDIA GB200 NVL72, specifications (GB200 NVL72 column: a rack of 72 GPUs)"
_NVL72_HGX = ("NVIDIA GB200 NVL72, specifications (Individual Blackwell GPU Specifications table, HGX B200 "
              "column)")
_RUBIN = ("NVIDIA Vera Rubin NVL72, specifications (Rubin GPU column; footnote 1: 'Preliminary information. "
          "All values are up to and subject to change.')")
_RTX = "NVIDIA GeForce RTX 5090, specifications"
_LMSYS = "LMSYS: NVIDIA DGX Spark In-Depth Review: A New Standard for Local AI Inference (2025-10-13)"
_SPARK = "NVIDIA Technical Blog: How NVIDIA DGX Spark's Performance Enables Intensive AI Tasks (zh-cn edition)"
_SPARSE = " [footnote '* With sparsity': dense is half]"
_BOTH = "both directions summed; half each way"

LINKS: dict[str, Link] = {link.name: link for link in (
    _link("nvlink4", Figure("900", G, halved=True),
          _s(_H100_URL, _H100, "Interconnect: NVIDIA NVLink: 900GB/s PCIe Gen5: 128GB/s"),
          f"fourth-generation NVLink (H100, H200): 900 GB/s per GPU, {_BOTH}"),
    _link("nvlink5", Figure("14.4", T, divisor=8, halved=True),
          _s(_DGX_B200_URL, _DGX, "8x NVIDIA Blackwell GPUs ... 14.4TB/s aggregate NVLink bandwidth"),
          f"fifth-generation NVLink (B200, GB200): 14.4 TB/s over 8 GPUs = 1.8 TB/s per GPU, {_BOTH}"),
    _link("nvlink6", Figure("3.6", T, halved=True),
          _s(_RUBIN_URL, _RUBIN, "NVLink Bandwidth: 3.6 TB/s (Rubin GPU); 260 TB/s (NVL72)"),
          f"sixth-generation NVLink (Rubin, announced): 3.6 TB/s per GPU, {_BOTH}"),
    _link("pcie4_x16", Figure("64", G, halved=True),
          _s("https://www.nvidia.com/en-us/data-center/a100/", "NVIDIA A100 Tensor Core GPU, specifications",
             "Interconnect: NVIDIA NVLink: 600GB/s PCIe Gen4: 64GB/s"),
          f"PCIe 4.0 x16 (16 GT/s a lane): 64 GB/s, {_BOTH}"),
    _link("pcie5_x16", Figure("128", G, halved=True),
          _s(_H100_URL, _H100, "Interconnect: NVIDIA NVLink: 900GB/s PCIe Gen5: 128GB/s"),
          f"PCIe 5.0 x16 (32 GT/s a lane): 128 GB/s, {_BOTH} (63 GB/s after 128b/130b coding)"),
    _link("pcie6_x16", Figure("256", G, halved=True),
          _s("https://pcisig.com/", "PCI-SIG: PCI Express 6.0 specification features",
             "Delivers 64 GT/s raw bit rate and up to 256 GB/s via x16 configuration"),
          f"PCIe 6.0 x16: 256 GB/s, {_BOTH} (FLIT framing costs a few per cent more)"),
    _link("nic_200g", Figure("200", G / 8),
          _s(_LMSYS_URL, _LMSYS, "two QSFP ports driven by NVIDIA ConnectX-7 NIC capable of up to 200 Gbps"),
          "200 Gb/s line rate, per direction (Ethernet and InfiniBand are full duplex); DGX Spark's link"),
    _link("nic_400g", Figure("400", G / 8),
          _s("https://docs.nvidia.com/networking/display/NVIDIAWinOF2Documentationv25750000/"
             "Supported+Network+Adapter+Cards+and+MFT+Tools",
             "NVIDIA WinOF-2 Documentation v25.7.50000: Supported Network Adapter Cards",
             "ConnectX-7 | InfiniBand: HDR, NDR200, NDR | Ethernet: ... 200GbE, 400GbE"),
          "400 Gb/s line rate per direction (NDR InfiniBand / 400GbE): one ConnectX-7 per GPU in H100/B200 "
          "scale-out designs"),
    _link("nic_800g", Figure("800", G / 8),
          _s("https://docs.nvidia.com/networking/display/connectx8firmwarev40440208/changes+and+new+features",
             "NVIDIA ConnectX-8 SuperNIC Firmware Release Notes v40.44.0208",
             "NVIDIA ConnectX-8 SuperNIC supports 800Gb/s or XDR IB or 2 x 400GbE link speeds."),
          "800 Gb/s line rate per direction (XDR InfiniBand): ConnectX-8, one per GPU in GB300-generation scale-out"),
    *(_link(name, Figure(text, unit, divisor, halved), src, notes)
      for name, text, unit, divisor, halved, src, notes in LINK_ENTRIES),
)}

_DGX_PERF = "8x NVIDIA Blackwell GPUs ... Performance: 72 petaFLOPS training and 144 petaFLOPS inference"
_NVL_MEM = "GPU Memory | Bandwidth: Up to 13.4 TB HBM3E | 576 TB/s"
_RUBIN_MEM = "GPU Memory | Bandwidth: 288 GB HBM4 | 22 TB/s"
_SPARK_MEM = ("具备每秒 1 千万亿次的 FP4 AI 计算性能、128 GB 的一致性统一系统内存，以及每秒 273 GB 的内存带宽 "
              "[1 PFLOP/s of FP4 AI compute, 128 GB of coherent unified system memory, 273 GB/s of memory bandwidth]")

HARDWARE: dict[str, Hardware] = {hw.name: hw for hw in (
    _hw("H100", {
        "flops.bfloat16": _sparse("1,979", T, _H100_URL, _H100,
                                "BFLOAT16 Tensor Core* 1,979 teraFLOPS"),
        "flops.float8": _sparse("3,958", T, _H100_URL, _H100,
                                "FP8 Tensor Core* 3,958 teraFLOPS"),
        "flops.int8": _sparse("3,958", T, _H100_URL, _H100,
                                "INT8 Tensor Core* 3,958 TOPS"),
        "bandwidth": (_F("3.35", T), _s(_H100_URL, _H100, "GPU Memory Bandwidth 3.35TB/s")),
        "capacity": (_F("80", G), _s(_H100_URL, _H100, "GPU Memory 80GB")),
    }, ("nvlink4", "pcie5_x16"), "H100 SXM. Dense FP8 ridge: 1979e12 / 3.35e12 = 591 FLOP/byte."),
    _hw("H200", {
        "flops.bfloat16": _sparse("1,979", T, _H200_URL, _H200,
                                "BFLOAT16 Tensor Core* 1,979 TFLOPS"),
        "flops.float8": _sparse("3,958", T, _H200_URL, _H200,
                                "FP8 Tensor Core* 3,958 TFLOPS"),
        "flops.int8": _sparse("3,958", T, _H200_URL, _H200,
                                "INT8 Tensor Core* 3,958 TFLOPS"),
        "bandwidth": (_F("4.8", T), _s(_H200_URL, _H200, "GPU Memory Bandwidth 4.8TB/s")),
        "capacity": (_F("141", G), _s(_H200_URL, _H200, "GPU Memory 141GB")),
    }, ("nvlink4", "pcie5_x16"), "H200 SXM: the H100's compute with 141 GB of HBM3e at 4.8 TB/s."),
    _hw("B200", {
        "flops.float8": (_F("72", P, divisor=8, halved=True),
                         _s(_DGX_B200_URL, _DGX, _DGX_PERF + " [training: FP8, with sparsity; per GPU /8, dense /2]")),
        "flops.float4": (_F("144", P, divisor=8, halved=True),
                         _s(_DGX_B200_URL, _DGX, _DGX_PERF + " [inference: FP4, with sparsity; per GPU /8, dense /2]")),
        "flops.bfloat16": _sparse("4.5", P, _NVL72_URL, _NVL72_HGX,
                                  "Individual Blackwell GPU Specifications ... HGX B200 ... FP16/BF16 Tensor Core* "
                                  "4.5 PFLOPS"),
        "bandwidth": (_F("64", T, divisor=8),
                      _s(_DGX_B200_URL, _DGX, "1,440GB total GPU memory ... 64TB/s HBM3e bandwidth")),
        "capacity": (_F("1,440", G, divisor=8), _s(_DGX_B200_URL, _DGX, "1,440GB total GPU memory")),
    }, ("nvlink5", "pcie5_x16"),
        "Per GPU of a DGX B200 (system / 8, sparse / 2): 4.5 PF dense FP8, 9 PF dense FP4 (the tutorial's "
        "'~9 PF' is this FP4 figure, or FP8 with sparsity), 8 TB/s, 180 GB (the B200 package carries 192 GB). "
        "Dense FP8 ridge: 4.5e15 / 8e12 = 562.5 FLOP/byte. The DGX B200 page prints no BF16 figure; the BF16 "
        "entry is the HGX B200 column of the GB200 NVL72 page's per-GPU table (4.5 PF with sparsity, 2.25 dense), "
        "which lists the HGX B200's bandwidth as 7.7 TB/s where the DGX page's 64 TB/s over 8 GPUs gives 8."),
    _hw("GB200 NVL72", {
        "flops.float4": _sparse("1,440", P, _NVL72_URL, _NVL72,
                                "FP4 Tensor Core* 1,440 PFLOPS", divisor=72),
        "flops.float8": _sparse("720", P, _NVL72_URL, _NVL72,
                                "FP8/FP6 Tensor Core* 720 PFLOPS", divisor=72),
        "flops.bfloat16": _sparse("360", P, _NVL72_URL, _NVL72,
                                "FP16/BF16 Tensor Core* 360 PFLOPS", divisor=72),
        "bandwidth": (_F("576", T, divisor=72), _s(_NVL72_URL, _NVL72, _NVL_MEM)),
        "capacity": (_F("13.4", T, divisor=72), _s(_NVL72_URL, _NVL72, _NVL_MEM)),
    }, ("nvlink5",),
        "Per GPU of the rack (totals / 72, sparse / 2). Rack totals: 72 Blackwell GPUs and 36 Grace CPUs; "
        "1,440 PF FP4, 720 PF FP8, 360 PF BF16 (all with sparsity); up to 13.4 TB HBM3E at 576 TB/s; 130 TB/s "
        "of NVLink. Per GPU: 5 PF dense FP8 (NVIDIA specifies the GB200's GPUs above the DGX/HGX B200's 4.5), "
        "~186 GB, 8 TB/s."),
    _hw("R200", {
        "flops.float4": (_F("35", P), _s(_RUBIN_URL, _RUBIN, "NVFP4 Training² 35 PFLOPS; footnote 2: 'Dense "
                         "specification' [NVFP4 Inference 50 PFLOPS is sparse: the datasheet adds 'NVFP4 Inference "
                         "specification is sparse.']")),
        "flops.float8": (_F("17.5", P), _s(_RUBIN_URL, _RUBIN, "FP8/FP6 Training² 17.5 PFLOPS; footnote 2: 'Dense "
                         "specification'")),
        "bandwidth": (_F("22", T), _s(_RUBIN_URL, _RUBIN, _RUBIN_MEM)),
        "capacity": (_F("288", G), _s(_RUBIN_URL, _RUBIN, _RUBIN_MEM)),
    }, ("nvlink6", "pcie6_x16"),
        "Announced, preliminary (NVIDIA's 'Rubin GPU'; 'R200' is the tutorial's name). The tutorial quotes "
        "'35 PF FP8, 20 TB/s, ridge ~800': those two give 35e15 / 20e12 = 1750 FLOP/byte, not ~800. NVIDIA's "
        "35 PF is the dense NVFP4 figure; its dense FP8 figure, 17.5 PF, over the announced 22 TB/s gives "
        "795 FLOP/byte, the tutorial's '~800'. FP4: 35e15 / 22e12 = 1591.", status="announced"),
    _hw("M3 Ultra", {
        "bandwidth": (_F("819", G), _s(_MAC_URL, _MAC, "Apple M3 Ultra chip ... 819GB/s memory bandwidth")),
        "capacity": (_F("512", G), _s(_MAC_URL, _MAC, "Apple M3 Ultra with 32-core CPU ... 96GB unified memory, "
                                      "configurable to 256GB or 512GB")),
    }, (),
        "Mac Studio (2025) with M3 Ultra; the memory is unified (shared with the CPU). Apple publishes no FLOP/s "
        "figure for the M3 Ultra's GPU, so flops is empty: a prefill estimate needs a user-supplied figure. "
        "(apple.com/mac-studio/specs/ now describes the 2026 M5 Ultra model; the 2025 model's specifications "
        "stay on Apple Support.)"),
    _hw("RTX 5090", {
        "flops.bfloat16": (_F("209.5", T), _s("https://images.nvidia.com/aem-dam/Solutions/geforce/blackwell/"
                           "nvidia-rtx-blackwell-gpu-architecture.pdf", "NVIDIA RTX Blackwell GPU Architecture "
                           "(whitepaper, GeForce RTX 5090 column)",
                           "Peak BF16 Tensor TFLOPS with FP32 Accumulate 209.5 [dense]")),
        "flops.float4": (_F("3352", T, halved=True),
                         _s(_RTX5090_URL, _RTX, "AI TOPS 3352 [FP4 with sparsity: dense is half]")),
        "bandwidth": (_F("1792", G), _s(_RTX5090_URL, _RTX, "Memory Bandwidth 1792 GB/sec")),
        "capacity": (_F("32", G), _s(_RTX5090_URL, _RTX, "Memory Configuration 32 GB GDDR7")),
    }, ("pcie5_x16",),
        "GeForce RTX 5090 (desktop). The whitepaper gives BF16 with FP32 accumulation (what BF16 GEMMs use); "
        "FP8 is left out (its accumulate-dependent rate was not confirmed). 32 GB cannot hold a 70B model, "
        "even at 4 bits (~35 GB of weights)."),
    _hw("DGX Spark", {
        "flops.float4": (_F("1", P, halved=True), _s(_LMSYS_URL, _LMSYS, "the GB10 delivers up to 1 PFLOP of "
                         "sparse FP4 tensor performance")),
        "bandwidth": (_F("273", G), _s(_SPARK_URL, _SPARK, _SPARK_MEM)),
        "capacity": (_F("128", G), _s(_SPARK_URL, _SPARK, _SPARK_MEM)),
    }, ("nic_200g",),
        "DGX Spark (GB10 Grace Blackwell superchip). The 128 GB is unified: shared with the 20 CPU cores. NVIDIA "
        "publishes only the sparse FP4 figure; no BF16 or FP8 peak."),
    *(_hw(name, {f: (Figure(*row[:4]), row[4]) for f, row in rows.items()}, links, notes)
      for name, rows, links, notes in ENTRIES),
)}

_LMSYS_8B = ("for smaller models, particularly Llama 3.1 8B, the DGX Spark held its own. With SGLang at batch 1, it "
             "achieved 7,991 tps prefill / 20.5 tps decode, scaling up linearly to 7,949 tps / 368 tps at batch 32")

MEASURED: dict[str, Measurement] = {
    "dgx_spark_llama31_8b_fp8_sglang_b1": Measurement(
        "DGX Spark", "Llama 3.1 8B", "FP8", "SGLang", 1, 7991.0, 20.5, _s(_LMSYS_URL, _LMSYS, _LMSYS_8B),
        "The tutorial's 'DGX Spark, 8B: prefill 7991 tok/s vs decode 20.5 tok/s, a 390x gap' (7991 / 20.5 = "
        "389.8). The model is Llama 3.1 8B served in FP8 by SGLang (the review's table: 'SGLang | 1-32 | Llama 3.1 "
        "8B (FP8)'), not Qwen3-8B; the prompt and output lengths are not stated in the text."),
    "dgx_spark_llama31_8b_fp8_sglang_b32": Measurement(
        "DGX Spark", "Llama 3.1 8B", "FP8", "SGLang", 32, 7949.0, 368.0, _s(_LMSYS_URL, _LMSYS, _LMSYS_8B),
        "Decode tokens/s summed over the 32 sequences."),
    "dgx_spark_llama31_70b_fp8_sglang": Measurement(
        "DGX Spark", "Llama 3.1 70B", "FP8", "SGLang", 1, 803.0, 2.7,
        _s(_LMSYS_URL, _LMSYS, "the Spark successfully ran Llama 3.1 70B (FP8) at 803 tps prefill / 2.7 tps decode"),
        "The text gives no batch size for this run; batch 1 is assumed (a 2.7 tok/s decode is a single stream)."),
}
