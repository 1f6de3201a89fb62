#include "kernels/gptq_rows.h"

#include <cublas_v2.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cublas_check.h"
#include "kernels/cuda_check.h"

namespace ssdq::kernels {
namespace {

constexpr int kRowsPerBlock = 128;

// One thread per row of one column block [i1, i1 + count). The row's working values live in a
// per-thread array (local memory: the loops index it by column); U's count × count diagonal block
// in shared memory. The arithmetic is quant/gptq.cc's with every product and difference rounded on
// its own (__fmul_rn, __fsub_rn: nvcc would otherwise contract them into FMAs).
__global__ void gptq_block_kernel(GptqRowsArgs a, int64_t i1, int count) {
  extern __shared__ float u_block[];
  for (int idx = threadIdx.x; idx < count * count; idx += blockDim.x)
    u_block[idx] = a.u[(i1 + idx / count) * a.cols + i1 + idx % count];
  __syncthreads();
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= a.rows) return;
  float work[kGptqRowsMaxBlock];
  float* row = a.weight + r * a.cols + i1;
  for (int j = 0; j < count; ++j) work[j] = row[j];
  for (int k = 0; k < count; ++k) {
    const int64_t column = i1 + k;
    const int group = a.column_group[column];
    float* scale_at = a.scales + r * a.groups + group;
    if (a.dynamic_scales && column % a.group_size == 0) {
      const int width = static_cast<int>(a.cols - column < a.group_size ? a.cols - column : a.group_size);
      float absmax = 0;
      for (int j = k; j < k + width; ++j) absmax = fmaxf(absmax, fabsf(work[j]));
      const float scale = __fdiv_rn(absmax, static_cast<float>(a.qmax));
      *scale_at = scale > 0 ? scale : 1.0f;
    }
    const float scale = *scale_at;
    const float rounded = rintf(__fdiv_rn(work[k], scale));
    const float code = isnan(rounded) ? 0.0f : fminf(fmaxf(rounded, static_cast<float>(a.qmin)), static_cast<float>(a.qmax));
    a.values[r * a.cols + column] = static_cast<int8_t>(code);
    const float err = __fdiv_rn(__fsub_rn(work[k], __fmul_rn(code, scale)), u_block[k * count + k]);
    for (int j = k + 1; j < count; ++j) work[j] = __fsub_rn(work[j], __fmul_rn(err, u_block[k * count + j]));
    a.errors[r * a.block_size + k] = err;
  }
}

}  // namespace

const char* gptq_rows_unsupported(const GptqRowsArgs& a) {
  if (!a.weight || !a.u || !a.column_group || !a.scales || !a.values || !a.errors) return "a buffer is missing";
  if (a.rows <= 0 || a.cols <= 0 || a.cols > (int64_t{1} << 30) / 4) return "the weight's shape is out of range";
  if (a.block_size < 1 || a.block_size > kGptqRowsMaxBlock) return "the block size is outside 1..128";
  if (a.group_size < 1 || a.groups < 1) return "the group size and count must be positive";
  if (a.dynamic_scales && a.block_size % a.group_size != 0) return "dynamic group scales need groups inside blocks";
  if (a.qmin >= a.qmax) return "the code range is empty";
  return "";
}

GptqRowPass::GptqRowPass() {
  cublasHandle_t handle = nullptr;
  check_cublas(cublasCreate(&handle), "cublasCreate");
  // fp32 products and sums: the lazy update feeds later columns' codes, TF32 would move them.
  check_cublas(cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
  handle_ = handle;
}

GptqRowPass::~GptqRowPass() {
  if (handle_) cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

void GptqRowPass::run(const GptqRowsArgs& a, cudaStream_t stream) {
  if (const std::string why = gptq_rows_unsupported(a); !why.empty()) throw std::runtime_error("gptq rows: " + why);
  auto handle = static_cast<cublasHandle_t>(handle_);
  check_cublas(cublasSetStream(handle, stream), "cublasSetStream");
  const size_t shared = sizeof(float) * a.block_size * a.block_size;
  check_cuda(cudaFuncSetAttribute(gptq_block_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)),
             "gptq rows: shared memory");
  const unsigned grid = static_cast<unsigned>((a.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  const float minus_one = -1.0f, one = 1.0f;
  for (int64_t i1 = 0; i1 < a.cols; i1 += a.block_size) {
    const int count = static_cast<int>(std::min<int64_t>(a.block_size, a.cols - i1));
    gptq_block_kernel<<<grid, kRowsPerBlock, sizeof(float) * count * count, stream>>>(a, i1, count);
    check_cuda(cudaGetLastError(), "gptq rows: block kernel");
    const int64_t i2 = i1 + count, rest = a.cols - i2;
    if (rest == 0) break;
    // Row-major W[:, i2:] (rows × rest, leading dimension cols) is column-major rest × rows; so are
    // E (count × rows, leading dimension block_size) and U[i1:i2, i2:] (rest × count, leading cols):
    // Wᵀ[i2:, :] −= U[i1:i2, i2:]ᵀ · Eᵀ.
    check_cublas(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(rest), static_cast<int>(a.rows), count,
                             &minus_one, a.u + i1 * a.cols + i2, static_cast<int>(a.cols), a.errors, a.block_size, &one,
                             a.weight + i2, static_cast<int>(a.cols)),
                 "gptq rows: lazy update");
  }
}

}  // namespace ssdq::kernels
