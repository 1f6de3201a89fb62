#include "kernels/gemm.h"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cublas_check.h"

namespace ssdq::kernels {

// Row-major out[m, n] = x[m, k] · w[n, k]ᵀ is, in cuBLAS's column-major view,
// outᵀ[n, m] = (w viewed as [k, n])ᵀ · (x viewed as [k, m]): the "TN" case.
struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
  }
};

Gemm::Gemm(void* workspace, size_t workspace_bytes) : workspace_(workspace), workspace_bytes_(workspace_bytes) {
  cublasLtHandle_t handle = nullptr;
  check_cublas(cublasLtCreate(&handle), "cublasLtCreate");
  handle_ = handle;
}

Gemm::~Gemm() {
  plans_.clear();
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

namespace {
cudaDataType_t cuda_type(ElementType type) {
  switch (type) {
    case ElementType::kF32: return CUDA_R_32F;
    case ElementType::kBF16: return CUDA_R_16BF;
    case ElementType::kF16: return CUDA_R_16F;
    case ElementType::kS8: return CUDA_R_8I;
    case ElementType::kS32: return CUDA_R_32I;
  }
  return CUDA_R_32F;
}

int64_t weight_stride(const GemmArgs& a) { return a.ldw ? a.ldw : a.k; }

// The largest power of two up to 256 dividing every operand address: cuBLASLt's heuristic
// assumes 256-byte aligned operands unless told otherwise, and sub-matrices (a weight group of a
// grouped projection) are less aligned than that.
int operand_alignment(const GemmArgs& a) {
  const uintptr_t bits = reinterpret_cast<uintptr_t>(a.x) | reinterpret_cast<uintptr_t>(a.w) |
                         reinterpret_cast<uintptr_t>(a.out) | 256;
  return static_cast<int>(bits & (~bits + 1));
}
}  // namespace

bool Gemm::supported(const GemmArgs& a) {
  if (a.in_type == ElementType::kS8)  // IMMA: int32 out, k and strides multiples of 4, no beta
    return a.out_type == ElementType::kS32 && !a.accumulate && a.m > 0 && a.n > 0 && a.k > 0 && a.k % 4 == 0 &&
           a.ldx % 4 == 0 && weight_stride(a) % 4 == 0 && weight_stride(a) >= a.k && a.x && a.w && a.out &&
           a.ldx >= a.k && a.ldout >= a.n;
  const bool types = (a.in_type == ElementType::kBF16 || a.in_type == ElementType::kF16 ||
                      a.in_type == ElementType::kF32) &&
                     (a.out_type == ElementType::kF32 || a.out_type == a.in_type);
  return types && (!a.tf32 || a.in_type == ElementType::kF32) && a.m > 0 && a.n > 0 && a.k > 0 && a.x && a.w && a.out && a.ldx >= a.k && weight_stride(a) >= a.k &&
         a.ldout >= a.n &&
         (!a.accumulate || a.out_type == ElementType::kF32);
}

const Gemm::Plan& Gemm::plan(const GemmArgs& args) {
  const int alignment = operand_alignment(args);
  const Key key{args.m,
                args.n,
                args.k,
                args.ldx,
                weight_stride(args),
                args.ldout,
                static_cast<int>(args.in_type) + (args.tf32 ? 100 : 0),
                static_cast<int>(args.out_type),
                args.accumulate,
                alignment};
  auto found = plans_.find(key);
  if (found != plans_.end()) return *found->second;
  auto plan = std::make_unique<Plan>();
  const cudaDataType_t in_type = cuda_type(args.in_type), out_type = cuda_type(args.out_type);
  const bool integer = args.in_type == ElementType::kS8;
  // fp32 inputs multiply in fp32: cuBLASLt uses TF32 only when asked (CUBLAS_COMPUTE_32F_FAST_TF32).
  const cublasComputeType_t compute = integer     ? CUBLAS_COMPUTE_32I
                                      : args.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                  : CUBLAS_COMPUTE_32F;
  check_cublas(cublasLtMatmulDescCreate(&plan->desc, compute, integer ? CUDA_R_32I : CUDA_R_32F),
        "cublasLtMatmulDescCreate");
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  check_cublas(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose), "TRANSA");
  check_cublas(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof keep), "TRANSB");
  check_cublas(cublasLtMatrixLayoutCreate(&plan->a, in_type, args.k, args.n, weight_stride(args)), "layout w");
  check_cublas(cublasLtMatrixLayoutCreate(&plan->b, in_type, args.k, args.m, args.ldx), "layout x");
  check_cublas(cublasLtMatrixLayoutCreate(&plan->c, out_type, args.n, args.m, args.ldout), "layout out");
  cublasLtMatmulPreference_t preference = nullptr;
  check_cublas(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
  check_cublas(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                             sizeof workspace_bytes_),
        "workspace preference");
  const uint32_t align_bytes = static_cast<uint32_t>(alignment);
  for (const auto attribute : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                               CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    check_cublas(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &align_bytes, sizeof align_bytes), "alignment");
  cublasLtMatmulHeuristicResult_t result{};
  int found_count = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), plan->desc, plan->a, plan->b, plan->c,
                                     plan->c, preference, 1, &result, &found_count);
  cublasLtMatmulPreferenceDestroy(preference);
  check_cublas(status, "cublasLtMatmulAlgoGetHeuristic");
  if (found_count == 0)
    throw std::runtime_error("cuBLASLt has no algorithm for a " + std::to_string(args.m) + "x" + std::to_string(args.n) +
                             "x" + std::to_string(args.k) + " GEMM");
  plan->algo = result.algo;
  return *plans_.emplace(key, std::move(plan)).first->second;
}

void Gemm::run(const GemmArgs& args, cudaStream_t stream) {
  if (!supported(args)) throw std::runtime_error("unsupported GEMM arguments");
  const Plan& p = plan(args);
  const float alpha = 1.0f, beta = args.accumulate ? 1.0f : 0.0f;
  const int32_t int_alpha = 1, int_beta = 0;
  const bool integer = args.in_type == ElementType::kS8;
  check_cublas(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p.desc,
                       integer ? static_cast<const void*>(&int_alpha) : &alpha, args.w, p.a, args.x, p.b,
                       integer ? static_cast<const void*>(&int_beta) : &beta, args.out, p.c, args.out, p.c, &p.algo,
                       workspace_, workspace_bytes_, stream),
        "cublasLtMatmul");
}

}  // namespace ssdq::kernels
