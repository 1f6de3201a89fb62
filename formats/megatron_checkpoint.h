// Megatron-LM checkpoints of pure Mamba-2 models as they are published (e.g.
// nvidia/mamba2-8b-3t-4k): a folder with latest_checkpointed_iteration.txt naming `release` or an
// iteration, and <iteration>/mp_rank_NN/model_optim_rng.pt per tensor-parallel rank. The
// hyper-parameters come from the pickled `args` (argparse.Namespace), tensor names are mapped to
// mamba_ssm's, and tensor-parallel shards are merged along the axes Megatron split them on:
//   in_proj     rows, per segment: every rank holds [z | x | B | C | dt] of its heads and groups
//   conv1d      rows, per segment [x | B | C]
//   A_log, D, dt_bias, the gated norm: concatenated (heads, channels)
//   out_proj    columns;   embedding, output_layer: rows (vocabulary)
//   norms:      replicated (checked equal)
// Hybrid checkpoints (attention or MLP layers), pipeline-parallel shards and the torch_dist
// (distributed) format are refused with a message saying so.
#pragma once

#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "formats/torch_bin.h"

namespace ssdq {

// True when `dir` holds latest_checkpointed_iteration.txt, or a release/ or mp_rank_00/ folder.
bool is_megatron_checkpoint(const std::string& dir);

// Reads the folder; errors name the file and the tensor or argument at fault.
Checkpoint load_megatron_checkpoint(const std::string& dir);

// The model from the parsed rank files, rank 0 first (`files` name them in errors; `iteration`
// is the folder that holds them). What load_megatron_checkpoint does after finding the files.
Checkpoint assemble_megatron_checkpoint(const std::vector<TorchCheckpoint>& shards,
                                        const std::vector<std::string>& files, const std::string& iteration);

}  // namespace ssdq
