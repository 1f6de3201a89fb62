// Tensor parallelism's sharding of a Mamba-2 model over `tp` ranks, SSM-aware (as mamba_ssm,
// vLLM and TensorRT-LLM shard it): each rank holds a contiguous range of heads — their z, x and dt
// rows of in_proj, their x channels of the conv, A, D, dt_bias, their SSM state, their channels of
// the gated norm and their columns of out_proj (row-parallel: the ranks' outputs are summed) — and
// the B/C groups its heads read: groups split over the ranks when ngroups % tp == 0, otherwise
// (tp % ngroups == 0) each rank holds a copy of the one group its heads lie in. The lm_head is
// vocab-parallel (each rank its rows of the vocabulary); the embedding and the norms are
// replicated. docs/TENSOR_PARALLEL.md describes what runs where.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/config.h"
#include "model/model_weights.h"
#include "model/quantized_model.h"

namespace ssdq {

struct TensorParallelPlan {
  int tp = 1;
  int64_t heads = 0, groups = 0, vocab = 0;
  bool groups_split = true;  // ngroups % tp == 0; else every rank holds one group, shared by tp / ngroups ranks

  int64_t local_heads() const { return heads / tp; }
  int64_t local_groups() const { return groups_split ? groups / tp : 1; }
  int64_t first_head(int rank) const { return rank * local_heads(); }
  // The first (global) group of rank `rank`'s B/C.
  int64_t first_group(int rank) const { return groups_split ? rank * local_groups() : rank * groups / tp; }
  // Ranks whose channels make up one gated-norm group (its sum of squares is combined across them).
  int ranks_per_norm_group() const { return groups_split ? 1 : tp / static_cast<int>(groups); }
  int64_t local_vocab() const { return vocab / tp; }
};

// The sizes `tp` may take for `config` (divisors of the head count, compatible with the groups and
// dividing the vocabulary), up to `limit`.
std::vector<int> valid_tensor_parallel_sizes(const Mamba2Config& config, int limit = 64);

// Fails, naming the valid sizes ("80 heads, 1 group, vocabulary 50288: --tp 2, 4, 8, 16"), when
// `tp` does not divide the model.
TensorParallelPlan plan_tensor_parallel(const Mamba2Config& config, int tp);

// A rank's config: d_inner_shard = its channels, ngroups = its groups; vocab_size is the
// embedding's (replicated), the rank's lm_head has local_vocab() rows.
Mamba2Config shard_config(const Mamba2Config& config, const TensorParallelPlan& plan);

// Rank `rank`'s weights (config from shard_config; lm_head always present: the rank's vocabulary
// rows of the untied head or of the tied embedding).
ModelWeights shard_weights(const ModelWeights& weights, const TensorParallelPlan& plan, int rank);

// Rank `rank`'s part of an artifact, as shard_weights for the FP model: weights in their stored
// representation (a quantized out_proj keeps its per-row scales; an int4 one its groups, which
// must not straddle ranks), activation formats on the rank's channels (a per-channel or per-group
// scale map restricted to them, a per-tensor scale as is), lm_head the rank's vocabulary rows.
// Fails naming the problem when the artifact cannot be sharded: an online Hadamard at out_proj's
// input mixes all of d_inner across ranks; int4 groups that straddle a shard boundary. The
// result's lm_head has local_vocab() rows (its config's vocab_size is the embedding's).
QuantizedModel shard_quantized_model(const QuantizedModel& model, const TensorParallelPlan& plan, int rank);

// The model back from its shards (the inverse of shard_weights); replicated tensors are checked
// equal across the ranks that hold them.
ModelWeights unshard_weights(const std::vector<ModelWeights>& shards, const Mamba2Config& config,
                             const TensorParallelPlan& plan);

}  // namespace ssdq
