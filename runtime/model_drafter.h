// Drafts by a model (GenerateOptions::drafter): a quantized artifact of the target drafting for it
// (self-speculation), or a smaller Mamba-2 of the same vocabulary. Each sequence has a batch-1
// decode session over the draft backend that follows the sequence's context: a call first feeds
// the tokens the context gained since the last call (the accepted ones), keeps the state, then
// takes as many tokens of the draft model as the generator asks for (`max_draft` at most; a step
// each after the first) and puts the kept state back, so the next call starts again at the
// context's end. Greedy sampling drafts greedily, and the text is plain decoding's. With a
// temperature the drafts are drawn from the draft model's distribution under the same sampling
// options (their numbers from (seed ^ kDraftStream, sequence, position)) and returned with it, so
// the target verifies them by speculative sampling's rule: the text has the target's distribution,
// whatever the draft, though not plain sampling's very draws.
#pragma once

#include <cstdint>

#include "runtime/backend.h"
#include "runtime/generate.h"
#include "runtime/sampling.h"

namespace ssdq {

// `draft` must outlive the drafter and share the target's vocabulary size (checked by the caller,
// which knows both); `sequences`: the batch the drafter serves (sequence ids 0 … sequences − 1).
Drafter model_drafter(const Backend& draft, int64_t sequences, int64_t max_draft, const SamplingOptions& sampling);

}  // namespace ssdq
