#include "kernels/ssd_chunk_scan.h"

#include <algorithm>
#include <climits>

#include "kernels/ssd_chunk_stages.cuh"

namespace ssdq::kernels {
namespace {

struct DeviceLimits {
  int multiprocessors = 0;
  size_t max_smem_per_block = 0;  // opt-in maximum of dynamic shared memory
};

bool current_device_limits(DeviceLimits* limits) {
  int device = 0, sms = 0, smem = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) return false;
  limits->multiprocessors = sms;
  limits->max_smem_per_block = static_cast<size_t>(smem);
  return true;
}

bool aligned(const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool shape_supported(const SsdChunkScanArgs& a) {
  if (a.batch < 1 || a.batch > 65535 || a.seqlen < 1 || a.heads < 1 || a.groups < 1) return false;
  if (a.heads % a.groups != 0) return false;
  if (a.headdim != 32 && a.headdim != 64 && a.headdim != 128) return false;
  if (a.dstate < 16 || a.dstate > 256 || a.dstate % 16 != 0) return false;
  if (a.chunk != 64 && a.chunk != 128 && a.chunk != 256) return false;
  const int64_t nchunks = ceil_div(a.seqlen, a.chunk);
  // Grid x of the ChunkScan and ChunkBMM launches: chunks x tiles x head blocks (or tile pairs).
  if (nchunks * (a.chunk / ssd_chunk::kTile) * a.heads > INT32_MAX) return false;
  if (nchunks * 10 > INT32_MAX || a.groups > 65535 || a.heads > 65535) return false;
  if (int64_t(a.batch) * a.seqlen > INT32_MAX) return false;
  return true;
}

bool pointers_supported(const SsdChunkScanArgs& a) {
  if (!a.x || !a.B || !a.C || !a.dt_raw || !a.dt_bias || !a.A || !a.D || !a.state || !a.y || !a.workspace) return false;
  if (!aligned(a.x, 16) || !aligned(a.B, 16) || !aligned(a.C, 16) || !aligned(a.y, 16)) return false;
  if (!aligned(a.workspace, 256)) return false;
  if (a.dt_type != ElementType::kBF16 && a.dt_type != ElementType::kF32) return false;
  // Operands and y: bf16 and bf16 (the FP path), or fp16 and fp32 (quantized float-SSD recipes).
  const bool bf16_path = a.operand_type == ElementType::kBF16 && a.y_type == ElementType::kBF16;
  const bool f16_path = a.operand_type == ElementType::kF16 && a.y_type == ElementType::kF32;
  if (!bf16_path && !f16_path) return false;
  if (a.state_type == ElementType::kF32) {
    if (!aligned(a.state, 32)) return false;
  } else if (a.state_type == ElementType::kS8) {
    if (!a.state_scales || (a.state_scale_inner != 1 && a.state_scale_inner != a.dstate)) return false;
  } else {
    return false;
  }
  if (a.x_row_stride % 8 != 0 || a.bc_row_stride % 8 != 0) return false;
  if (a.x_row_stride < int64_t(a.heads) * a.headdim || a.bc_row_stride < int64_t(a.groups) * a.dstate) return false;
  if (a.dt_row_stride < a.heads) return false;
  return true;
}

}  // namespace

namespace ssd_chunk {

WorkspaceLayout workspace_layout(const SsdChunkScanArgs& a) {
  auto round_up = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  const size_t nchunks = static_cast<size_t>(ceil_div(a.seqlen, a.chunk));
  const size_t per_chunk_heads = size_t(a.batch) * a.heads * nchunks;
  WorkspaceLayout layout;
  layout.dt = 0;
  layout.cumsum = layout.dt + round_up(per_chunk_heads * a.chunk * sizeof(float));
  layout.cb = layout.cumsum + round_up(per_chunk_heads * a.chunk * sizeof(float));
  layout.chunk_states =
      layout.cb + round_up(size_t(a.batch) * nchunks * a.groups * a.chunk * a.chunk * sizeof(float));
  layout.total = layout.chunk_states + round_up(per_chunk_heads * a.headdim * a.dstate * sizeof(bf16));
  return layout;
}

}  // namespace ssd_chunk

bool ssd_chunk_scan_supported(const SsdChunkScanArgs& a) {
  if (!shape_supported(a) || !pointers_supported(a)) return false;
  DeviceLimits limits;
  if (!current_device_limits(&limits)) return false;
  const size_t smem = std::max({ssd_chunk::output_smem_bytes(a.headdim, a.dstate, a.chunk),
                                ssd_chunk::state_smem_bytes(32, a.dstate), ssd_chunk::bmm_smem_bytes(a.dstate)});
  return smem <= limits.max_smem_per_block;
}

size_t ssd_chunk_scan_workspace_bytes(const SsdChunkScanArgs& a) {
  if (!shape_supported(a)) return 0;
  return ssd_chunk::workspace_layout(a).total;
}

namespace ssd_chunk {

bool make_plan(const SsdChunkScanArgs& a, Plan* plan_out) {
  if (!ssd_chunk_scan_supported(a)) return false;
  DeviceLimits limits;
  if (!current_device_limits(&limits)) return false;
  Plan plan;
  plan.args = a;
  plan.nchunks = static_cast<int>(ceil_div(a.seqlen, a.chunk));
  plan.tiles_per_chunk = a.chunk / kTile;
  plan.heads_per_group = a.heads / a.groups;
  // Enough blocks to fill the device twice over decides how much work each block takes on:
  // more state rows per ChunkState block (128 rows: two heads of headdim 64 share each B tile) and
  // more heads per ChunkScan block share more loads.
  const int64_t target_blocks = 2 * int64_t(limits.multiprocessors);
  plan.state_rows = 32;
  for (int rows : {128, 64}) {
    if (state_rows_valid(a, rows) && int64_t(a.batch) * a.heads * a.headdim / rows >= target_blocks) {
      plan.state_rows = rows;
      break;
    }
  }
  const int64_t scan_units = int64_t(a.batch) * plan.nchunks * plan.tiles_per_chunk * a.heads;
  plan.heads_per_block = 1;
  for (int k = kMaxHeadsPerBlock; k > 1; k /= 2) {
    if (plan.heads_per_group % k == 0 && scan_units / k >= target_blocks) {
      plan.heads_per_block = k;
      break;
    }
  }
  plan.head_blocks = a.heads / plan.heads_per_block;
  const WorkspaceLayout layout = workspace_layout(a);
  auto* base = static_cast<unsigned char*>(a.workspace);
  plan.dt = reinterpret_cast<float*>(base + layout.dt);
  plan.cumsum = reinterpret_cast<float*>(base + layout.cumsum);
  plan.cb = reinterpret_cast<float*>(base + layout.cb);
  plan.chunk_states = base + layout.chunk_states;
  *plan_out = plan;
  return true;
}

cudaError_t launch_stage(const StageLaunch& stage, const Plan& plan, cudaStream_t stream) {
  if (stage.smem > 0) {
    const cudaError_t status =
        cudaFuncSetAttribute(stage.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(stage.smem));
    if (status != cudaSuccess) return status;
  }
  void* params[] = {const_cast<Plan*>(&plan)};
  return cudaLaunchKernel(stage.kernel, stage.grid, stage.block, params, stage.smem, stream);
}

}  // namespace ssd_chunk

cudaError_t launch_ssd_chunk_scan(const SsdChunkScanArgs& a, cudaStream_t stream) {
  ssd_chunk::Plan plan;
  if (!ssd_chunk::make_plan(a, &plan)) return cudaErrorInvalidValue;
  for (const ssd_chunk::StageLaunch& stage : {ssd_chunk::cumsum_stage(plan), ssd_chunk::bmm_stage(plan),
                                             ssd_chunk::state_stage(plan), ssd_chunk::output_stage(plan)}) {
    const cudaError_t status = ssd_chunk::launch_stage(stage, plan, stream);
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace ssdq::kernels
