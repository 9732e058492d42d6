"""The bundled default implementation `python -m ref conform` runs with no --impl. It
covers every op of the catalog, with code that is not the oracle:

- ml_dtypes' C++ casts for the element codecs (`ml_dtypes_casts`: a real third-party
  library, with its known deviations listed in ml_dtypes_casts.xfails);
- `numpy_sr_bits`: stochastic rounding with explicit random bits by integer
  arithmetic on the input's bits;
- `numpy_stochastic`: Philox stochastic-rounding samplers for the statistical
  `encode_stochastic_rng` ops;
- `numpy_blocks`: the MX and NVFP4 block codecs composed from float32/float64 NumPy
  steps and ml_dtypes' element casts, as a kernel composes them;
- `numpy_groups`: integer group codecs, int32 and FP4 packing by bit arithmetic, the
  128x4 scale layout by reshapes and transposes;
- `numpy_attention`: float32 NumPy attention kernels for the bounded attention ops;
- `numpy_paged`: slot mapping, writing K and V by slot in vLLM's and FlashInfer's
  layouts, FlashInfer's page table, and a block manager with reference counts;
- `numpy_paged_attention`: a float32 paged-attention kernel walking each sequence's
  blocks with an online softmax;
- `numpy_roofline`: the roofline accounting (bytes, parameters, FLOPs) by exact
  Python-int arithmetic on object arrays, and the serving formulas in float64;
- `python_prefix_blocks`: vLLM's block hashes (CBOR by hand, pickle from the standard
  library) and its hash-chained prefix cache over an OrderedDict free queue;
- `python_radix`: SGLang's radix prefix cache as a trie with one edge per page;
- `numpy_specdec`: speculative rejection sampling (vLLM's contract and the inverse-CDF
  chain): one program per request in Python floats, racing by division, the CDF by a
  running sum;
- `numpy_specdec_rng`: a speculative-decoding step drawing its own numbers (PCG64,
  Gumbel-max draws) for the statistical `specdec.rejection_sample_rng`;
- `numpy_awq`: AWQ's scale and clip searches in float32, as AutoAWQ runs them (float32
  sums, the loss as the float output minus the quantized one, clip rows in blocks);
- `numpy_spec_trees`: token trees (masks, positions, SGLang's links), greedy tree
  verification, multi-draft and target-only tree sampling, Medusa's typical acceptance;
- `numpy_lattice`: the E8 and D8 nearest points, row by row in exact fractions;
- `numpy_hqq`: HQQ's zero-point solver in float32 with groups as rows, and hqq's bit
  packings by field loops;
- `numpy_hadamard`: randomized Hadamard transforms as one dense float32 product with
  the small matrices built by its own code;
- `numpy_quant_codecs`: round-to-nearest group quantization with groups as rows, each
  step one float32 (or float64) operation on per-row scalars, the MSE search over every
  shrink at once;
- `numpy_quant_packing`: GPTQ, AWQ and compressed-tensors words built from Python
  integers (one big integer per run of codes, cut by masks), g_idx by a loop;
- `numpy_quant_gemm`: quantized GEMMs as a kernel runs them: operands dequantized to
  bfloat16 (or their own scales), one float32 BLAS product, the output rounded;
- `numpy_gptq`: GPTQ in float32 in the paper's unblocked form (one rank-1 update of
  every later column per column), judged by the agreement rule;
- `numpy_kv_kivi`: KIVI's KV-cache codec with groups as the rows of a matrix in the
  reference kernel's transposed layout, its int32 packing by shifts, the cache as
  every token in arrival order with two counters, float32 attention over it;
- `numpy_kv_qjl`: QJL sign sketches and scores in float32, the reference's outlier
  split, attention over the decoded keys;
- `numpy_kv_turboquant`: TurboQuant's codebooks by Gauss-Legendre quadrature in the
  angle, the rotated codes by searching the thresholds, the residual sketch in float64;
- `numpy_kv_oscar`: OSCAR's calibration, INT2 codes and quarter-row bytes, attention
  in two passes (bf16 windows, INT2 middle) merged by their softmax states;
- `numpy_sparse_block`, `numpy_sparse_nsa_select`, `numpy_sparse_nsa`, `numpy_sparse_moba`,
  `numpy_sparse_dsa`, `numpy_sparse_traffic`: sparse attention (spec/sparse.md);
- `numpy_ssm_ssd`, `numpy_ssm_mamba1`, `numpy_ssm_gdn`, `numpy_ssm_sizes`: state-space
  and linear-attention layers (spec/ssm.md).

All but ml_dtypes_casts are written independently of the oracles and import nothing
from ref. `ref.conformance.adapters.DEFAULT` names this module for the command line
and the pytest plugin; `XFAILS` is its expected failures (the casts')."""

from __future__ import annotations

from pathlib import Path

from ref.conformance.adapters import (
    ml_dtypes_casts,
    numpy_attention,
    numpy_awq,
    numpy_blocks,
    numpy_gptq,
    numpy_groups,
    numpy_hadamard,
    numpy_hqq,
    numpy_kv_kivi,
    numpy_kv_oscar,
    numpy_kv_qjl,
    numpy_kv_turboquant,
    numpy_lattice,
    numpy_paged,
    numpy_paged_attention,
    numpy_quant_codecs,
    numpy_quant_gemm,
    numpy_quant_packing,
    numpy_roofline,
    numpy_spec_trees,
    numpy_sparse_block,
    numpy_sparse_dsa,
    numpy_sparse_moba,
    numpy_sparse_nsa,
    numpy_sparse_nsa_select,
    numpy_sparse_traffic,
    numpy_specdec,
    numpy_specdec_rng,
    numpy_ssm_gdn,
    numpy_ssm_mamba1,
    numpy_ssm_sizes,
    numpy_ssm_ssd,
    numpy_sr_bits,
    numpy_stochastic,
    python_prefix_blocks,
    python_radix,
)

PARTS = (ml_dtypes_casts, numpy_sr_bits, numpy_stochastic, numpy_blocks, numpy_groups, numpy_attention,
         numpy_roofline, numpy_paged, numpy_paged_attention, python_prefix_blocks, python_radix,
         numpy_specdec, numpy_specdec_rng, numpy_spec_trees, numpy_lattice, numpy_hqq,
         numpy_hadamard, numpy_awq, numpy_quant_codecs, numpy_quant_packing, numpy_quant_gemm,
         numpy_gptq, numpy_kv_kivi, numpy_kv_qjl,
         numpy_kv_turboquant, numpy_kv_oscar, numpy_sparse_block, numpy_sparse_nsa_select, numpy_sparse_nsa,
         numpy_sparse_moba, numpy_sparse_dsa, numpy_sparse_traffic, numpy_ssm_ssd, numpy_ssm_mamba1, numpy_ssm_gdn,
         numpy_ssm_sizes)
XFAILS = Path(ml_dtypes_casts.__file__).with_suffix(".xfails")  # the default run's expected failures
NAME = " + ".join([f"{ml_dtypes_casts.NAME} casts"] + [part.NAME for part in PARTS[1:]])
VERSION = f"ml_dtypes {ml_dtypes_casts.VERSION}, numpy {numpy_attention.VERSION}"
OPS = {name: kernel for part in PARTS for name, kernel in part.OPS.items()}
VARIANTS = {pattern: axes for part in PARTS for pattern, axes in part.VARIANTS.items()}
DTYPES = dict(ml_dtypes_casts.DTYPES)
