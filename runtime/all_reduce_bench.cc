#include "runtime/all_reduce_bench.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>

#include "formats/error.h"
#include "kernels/tp_all_reduce.h"
#include "runtime/cuda_communicator.h"
#include "runtime/cuda_resources.h"
#include "runtime/cuda_tensor_parallel.h"

namespace ssdq {
namespace {

// One rank's buffers and stream for the timed calls.
struct RankRun {
  cudaStream_t stream = nullptr;
  float *residual = nullptr, *fallback = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
};

}  // namespace

std::vector<AllReduceTiming> measure_all_reduce(int tp, int first_device, int64_t width, bool folded,
                                                const std::vector<int64_t>& rows, int calls, int repeats,
                                                std::string* group_description) {
  if (tp < 2) fail("bench --module allreduce: give --tp 2 or more");
  std::vector<int> devices;
  for (int r = 0; r < tp; ++r) devices.push_back(first_device + r);
  CudaRankGroup group(devices);
  if (group_description) *group_description = group.describe();
  RankThreads threads(devices);
  const int64_t most_rows = *std::max_element(rows.begin(), rows.end());
  const int64_t most_floats = most_rows * (width + 1);
  std::vector<RankRun> runs(tp);
  threads.run([&](int r) {
    RankRun& run = runs[r];
    cuda_ok(cudaStreamCreateWithFlags(&run.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_ok(cudaMalloc(&run.residual, most_rows * width * 4), "cudaMalloc");
    cuda_ok(cudaMalloc(&run.fallback, most_floats * 4), "cudaMalloc");
    cuda_ok(cudaMemset(run.residual, 0, most_rows * width * 4), "cudaMemset");
    // Positive partials (sums of squares among them): the folded scale stays finite.
    std::vector<float> ones(most_floats, 1e-3f);
    cuda_ok(cudaMemcpy(run.fallback, ones.data(), most_floats * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    for (int64_t layer = 0; layer < 2; ++layer) {
      float* buffer = group.rank(r).partial_buffer(1, layer, nullptr);
      cuda_ok(cudaMemcpy(buffer, ones.data(), std::min(most_floats, CudaRankGroup::kOneShotMaxFloats) * 4,
                         cudaMemcpyHostToDevice),
              "cudaMemcpy");
    }
    cuda_ok(cudaEventCreate(&run.start), "cudaEventCreate");
    cuda_ok(cudaEventCreate(&run.stop), "cudaEventCreate");
  });

  // µs per call of `calls` all-reduces of `m` rows, by the one-shot (registered buffers) or NCCL
  // (the fallback buffer), best of the repeats.
  auto time_calls = [&](int64_t m, bool one_shot, bool graph) {
    std::vector<double> best(tp, 1e30);
    threads.run([&](int r) {
      RankRun& run = runs[r];
      const DeviceCommunicator& comm = group.rank(r);
      kernels::TpReduceArgs a;
      a.rows = m;
      a.width = width;
      a.residual = run.residual;
      a.folded_norm = folded;
      a.norm_width = static_cast<float>(width);
      auto enqueue = [&] {
        for (int i = 0; i < calls; ++i)
          // One float always fits the one-shot: the registered buffer of this parity, whatever m is.
          comm.sum_into_residual(a, one_shot ? comm.partial_buffer(1, i, run.fallback) : run.fallback, run.stream);
      };
      cudaGraphExec_t exec = nullptr;
      if (graph) {
        cudaGraph_t g;
        cuda_ok(cudaStreamBeginCapture(run.stream, cudaStreamCaptureModeThreadLocal), "capture");
        enqueue();
        cuda_ok(cudaStreamEndCapture(run.stream, &g), "capture");
        cuda_ok(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
        cudaGraphDestroy(g);
      }
      auto once = [&] { graph ? cuda_ok(cudaGraphLaunch(exec, run.stream), "cudaGraphLaunch") : enqueue(); };
      once();  // warm-up
      cuda_ok(cudaStreamSynchronize(run.stream), "warm-up");
      for (int rep = 0; rep < repeats; ++rep) {
        cuda_ok(cudaEventRecord(run.start, run.stream), "cudaEventRecord");
        once();
        cuda_ok(cudaEventRecord(run.stop, run.stream), "cudaEventRecord");
        cuda_ok(cudaEventSynchronize(run.stop), "cudaEventSynchronize");
        float ms = 0;
        cuda_ok(cudaEventElapsedTime(&ms, run.start, run.stop), "cudaEventElapsedTime");
        best[r] = std::min(best[r], 1000.0 * ms / calls);
      }
      if (exec) cudaGraphExecDestroy(exec);
    });
    return *std::max_element(best.begin(), best.end());  // the slowest rank's
  };

  std::vector<AllReduceTiming> out;
  for (const int64_t m : rows) {
    AllReduceTiming t;
    t.rows = m;
    t.width = width;
    const int64_t floats = m * (width + (folded ? 1 : 0));
    t.bytes = floats * 4;
    t.engine_one_shot = group.rank(0).one_shot(floats);
    if (group.peer_access() && floats <= CudaRankGroup::kOneShotMaxFloats) {
      t.one_shot_graph_us = time_calls(m, true, true);
      t.one_shot_eager_us = time_calls(m, true, false);
    }
    if (group.nccl()) {
      t.nccl_graph_us = time_calls(m, false, true);
      t.nccl_eager_us = time_calls(m, false, false);
    }
    out.push_back(t);
  }
  threads.run([&](int r) {
    cudaFree(runs[r].residual);
    cudaFree(runs[r].fallback);
    cudaEventDestroy(runs[r].start);
    cudaEventDestroy(runs[r].stop);
    cudaStreamDestroy(runs[r].stream);
  });
  return out;
}

}  // namespace ssdq
