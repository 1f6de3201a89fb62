// Per-row reductions of fp32 logits: the NLL of a target token (-log softmax) and the greedy
// argmax. Used on blocks of lm_head output rows so that eval never holds [tokens, vocab].
// CPU reference: runtime/cpu_ops.h `cpu::nll` (and std::max_element for argmax).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ssdq::kernels {

struct LogitsReduceArgs {
  int64_t rows = 0;
  int vocab = 0;
  const float* logits = nullptr;     // [rows, vocab]
  const int32_t* targets = nullptr;  // [rows]; with nll
  float* nll = nullptr;              // [rows] or null
  int32_t* argmax = nullptr;         // [rows] or null (lowest index on ties)
};

bool logits_reduce_supported(const LogitsReduceArgs& args);
cudaError_t launch_logits_reduce(const LogitsReduceArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
