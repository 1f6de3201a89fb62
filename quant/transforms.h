// Transformations of FP32 model weights that leave the model's function unchanged (docs/QUANTIZATION.md, "Recipes");
// they prepare the weights for quantization. Each works in place on a runtime ModelWeights.
#pragma once

#include <cstdint>
#include <vector>

#include "quant/head_permutation.h"
#include "quant/parallel_items.h"
#include "model/model_weights.h"

namespace ssdq {

// `parallel` (quant/parallel_items.h) spreads layers and blocks of table rows over the cores; the
// transforms give the same bits either way.

// RMSNorm γ fusion: every layer's in_proj ← in_proj·diag(norm) and norm ← 1; the final norm goes
// into an explicit lm_head ← head()·diag(norm_f), norm_f ← 1, and config.tie_embeddings = false
// (the head is no longer the embedding).
void fuse_norm_weights(ModelWeights& weights, const ParallelFor& parallel = {});

// `count` signs ±1 from std::mt19937_64(seed): sign i is -1 when the i-th draw's top bit is set.
std::vector<float> random_signs(int64_t count, uint64_t seed);

// Residual rotation by the orthogonal Q = diag(signs)·H_D/√D (signs empty: Q = H_D/√D), hadamard.h's
// matrix and normalization: embedding ← embedding·Q, in_proj ← in_proj·Q, out_proj ← Qᵀ·out_proj and
// lm_head ← lm_head·Q (a tied head follows the embedding). The residual stream becomes r·Q, which
// RMSNorm without γ maps to rmsnorm(r)·Q, so every norm weight must be 1 (fuse_norm_weights first);
// fails otherwise, and when D is not a supported Hadamard order.
void rotate_residual(ModelWeights& weights, const std::vector<float>& signs, const ParallelFor& parallel = {});

// Online Hadamard at out_proj.in: out_proj ← out_proj·H_E/√E in every layer. The runtime then MUST
// replace each gated-norm output row y by y·H_E/√E (apply_hadamard_rows(y, rows, E, true)) before
// out_proj, since (y·H/√E)·(W·H/√E)ᵀ = y·Wᵀ. With `blocks` B the rotation is I_B ⊗ H_{E/B}/√(E/B)
// (each block of E/B columns alone; the runtime rotates rows·B rows of E/B). Fails when E/B is
// not a supported Hadamard order.
void fuse_out_proj_hadamard(ModelWeights& weights, int64_t blocks = 1, const ParallelFor& parallel = {});

// Reorders heads and headdim channels (see head_permutation.h) consistently in one layer: the z, x
// and dt rows of in_proj, the x channels of the conv weight and bias, A, D, dt_bias, the gated-norm
// weight and the columns of out_proj. Fails when `perm` is not valid for the config.
void reorder_heads(LayerWeights& layer, const Mamba2Config& config, const HeadPermutation& perm);

}  // namespace ssdq
