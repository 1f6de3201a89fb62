// The tensor-parallel all-reduce alone (a benchmark: it measures and prints, it asserts nothing):
// out_proj's partial rows summed into the residual over `tp` GPUs of this process, by the
// one-shot peer kernel and by NCCL, eagerly and captured in CUDA graphs (`ssdq bench --module
// allreduce`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ssdq {

struct AllReduceTiming {
  int64_t rows = 0, width = 0, bytes = 0;  // one rank's message: rows × (width + folded sums) floats
  double one_shot_graph_us = 0, one_shot_eager_us = 0;  // 0: the one-shot does not take this size
  double nccl_graph_us = 0, nccl_eager_us = 0;          // 0: NCCL absent
  bool engine_one_shot = false;                         // the route the engine takes for this size
  // The engine's route inside a graph, µs per call.
  double engine_graph_us() const { return engine_one_shot ? one_shot_graph_us : nccl_graph_us; }
};

// Per call, the mean over `calls` calls a repeat, best of `repeats`, on GPUs first_device … .
// `folded`: each message carries the folded gated norm's per-row sums after its rows.
std::vector<AllReduceTiming> measure_all_reduce(int tp, int first_device, int64_t width, bool folded,
                                                const std::vector<int64_t>& rows, int calls, int repeats,
                                                std::string* group_description);

}  // namespace ssdq
