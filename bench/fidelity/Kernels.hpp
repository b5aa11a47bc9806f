#pragma once
// The cost model's kernel terms against kernel timings measured on a GPU (issue 26):
// bench/fidelity/kernels-h100.jsonl, written by tests/gpu/kernels.py on a lent H100.

#include <string>

namespace pipestudio::fidelity {

/// Prints the GEMM, expert-GEMM and attention tables of the kernel check, with the GEMM fill
/// (GpuSpec::gemmFillK) fitted from the measurements. False when the measurements cannot be read
/// or the attention kernel model misses its target.
bool printKernelChecks(const std::string& path, bool markdown);

}  // namespace pipestudio::fidelity
