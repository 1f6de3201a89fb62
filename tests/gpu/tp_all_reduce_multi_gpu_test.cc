// The tensor-parallel all-reduce on 2 GPUs (or every GPU visible, up to 8) against
// kernels::tp_all_reduce_reference: the one-shot peer kernel and the NCCL route, plain and with the
// folded gated norm's sums of squares, eager and captured in a CUDA graph, many rounds in a row
// (the two partial buffers alternating). Every rank must hold the same bits.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "kernels/tp_all_reduce.h"
#include "runtime/cuda_communicator.h"
#include "runtime/cuda_tensor_parallel.h"
#include "tests/gpu/model_test_util.h"

namespace ssdq {
namespace {

std::vector<int> test_devices() {
  const int n = std::min(testing::visible_gpus(), kernels::kMaxTpRanks);
  std::vector<int> devices;
  for (int d = 0; d < n; ++d) devices.push_back(d);
  return devices;
}

struct Case {
  int64_t rows, width;
  bool folded, bias;
  int rounds;
  bool graph;
};

void check(cudaError_t e, const char* what) { ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e); }

class TpAllReduce : public ::testing::TestWithParam<Case> {};

TEST_P(TpAllReduce, EveryRankGetsTheReferenceBitIdentical) {
  const std::vector<int> devices = test_devices();
  ASSERT_GE(devices.size(), 2u) << "this test needs 2 GPUs (run it on a multi-GPU machine)";
  const Case c = GetParam();
  const int n = static_cast<int>(devices.size());
  CudaRankGroup group(devices);
  RankThreads threads(devices);
  const int64_t floats = c.rows * c.width + (c.folded ? c.rows : 0);
  std::mt19937 rng(static_cast<unsigned>(c.rows * 131 + c.width));
  std::uniform_real_distribution<float> value(-1.f, 1.f), positive(0.5f, 4.f);
  // Host copies: each round's partials per rank, the residual start, the bias.
  std::vector<std::vector<std::vector<float>>> partials(c.rounds, std::vector<std::vector<float>>(n));
  for (auto& round : partials)
    for (auto& p : round) {
      p.resize(floats);
      for (int64_t i = 0; i < c.rows * c.width; ++i) p[i] = value(rng);
      for (int64_t i = c.rows * c.width; i < floats; ++i) p[i] = positive(rng);
    }
  std::vector<float> residual(c.rows * c.width), bias(c.width);
  for (float& v : residual) v = value(rng);
  for (float& v : bias) v = value(rng);
  // The reference: the rounds one after another.
  std::vector<float> expected = residual;
  for (int r = 0; r < c.rounds; ++r) {
    kernels::TpReduceArgs a;
    a.ranks = n;
    a.rows = c.rows;
    a.width = c.width;
    for (int q = 0; q < n; ++q) a.partials[q] = partials[r][q].data();
    a.residual = expected.data();
    a.bias = c.bias ? bias.data() : nullptr;
    a.folded_norm = c.folded;
    a.norm_width = 5120.f;
    a.eps = 1e-5f;
    kernels::tp_all_reduce_reference(a);
  }
  std::vector<std::vector<float>> results(n);
  std::vector<std::string> routes(n);
  threads.run([&](int rank) {
    const DeviceCommunicator& comm = group.rank(rank);
    cudaStream_t stream;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    float *d_residual, *d_bias, *d_fallback;
    check(cudaMalloc(&d_residual, residual.size() * 4), "malloc");
    check(cudaMalloc(&d_bias, bias.size() * 4), "malloc");
    check(cudaMalloc(&d_fallback, floats * 4), "malloc");
    check(cudaMemcpy(d_residual, residual.data(), residual.size() * 4, cudaMemcpyHostToDevice), "copy");
    check(cudaMemcpy(d_bias, bias.data(), bias.size() * 4, cudaMemcpyHostToDevice), "copy");
    routes[rank] = comm.route(floats);
    for (int r = 0; r < c.rounds; ++r) {
      float* partial = comm.partial_buffer(floats, r, d_fallback);
      check(cudaMemcpyAsync(partial, partials[r][rank].data(), floats * 4, cudaMemcpyHostToDevice, stream), "copy");
      kernels::TpReduceArgs a;
      a.rows = c.rows;
      a.width = c.width;
      a.residual = d_residual;
      a.bias = c.bias ? d_bias : nullptr;
      a.folded_norm = c.folded;
      a.norm_width = 5120.f;
      a.eps = 1e-5f;
      if (c.graph) {
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
        comm.sum_into_residual(a, partial, stream);
        check(cudaStreamEndCapture(stream, &graph), "end capture");
        check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
        check(cudaGraphLaunch(exec, stream), "launch");
        check(cudaStreamSynchronize(stream), "sync");
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
      } else {
        comm.sum_into_residual(a, partial, stream);
      }
    }
    check(cudaStreamSynchronize(stream), "sync");
    results[rank].resize(residual.size());
    check(cudaMemcpy(results[rank].data(), d_residual, residual.size() * 4, cudaMemcpyDeviceToHost), "copy back");
    cudaFree(d_residual);
    cudaFree(d_bias);
    cudaFree(d_fallback);
    cudaStreamDestroy(stream);
  });
  SCOPED_TRACE(routes[0]);
  for (int rank = 1; rank < n; ++rank)
    ASSERT_EQ(0, std::memcmp(results[rank].data(), results[0].data(), results[0].size() * 4))
        << "rank " << rank << "'s residual differs from rank 0's";
  double worst = 0, scale = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    worst = std::max(worst, std::abs(double(results[0][i]) - expected[i]));
    scale = std::max(scale, std::abs(double(expected[i])));
  }
  // The same additions in the same order; rsqrtf and fused multiply-adds differ from the host by a
  // few ulps of the largest terms (the folded scale multiplies sums near 1 by ~30).
  EXPECT_LT(worst, 1e-6 * scale) << group.describe();
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TpAllReduce,
    ::testing::Values(Case{1, 2560, true, false, 1, false},      // 2.7b decode, one sequence: one-shot
                      Case{1, 4096, false, true, 7, false},      // 8B-like, several rounds (buffers alternate)
                      Case{32, 2560, true, false, 5, true},      // captured in graphs
                      Case{3, 260, true, true, 4, true},         // a width that is no multiple of the block's
                      Case{600, 4096, true, false, 3, false},    // over the one-shot's size: NCCL
                      Case{2048, 2560, false, false, 2, true}),  // a prefill's rows through NCCL, captured
    [](const auto& info) {
      const Case& c = info.param;
      return "rows" + std::to_string(c.rows) + "_width" + std::to_string(c.width) + (c.folded ? "_folded" : "") +
             (c.bias ? "_bias" : "") + (c.graph ? "_graph" : "");
    });

}  // namespace
}  // namespace ssdq
