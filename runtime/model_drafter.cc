#include "runtime/model_drafter.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "formats/error.h"
#include "runtime/decode_session.h"

namespace ssdq {
namespace {

// One sequence's draft session: the context tokens it has read, its state kept while drafting.
struct DraftSequence {
  std::unique_ptr<DecodeSession> session;
  std::unique_ptr<InferenceState> kept;
  size_t read = 0;              // context tokens the session's state has read
  std::vector<float> logits;    // after the last token read (sampled drafts)
  int32_t argmax = 0;           // after the last token read (greedy drafts)
};

class ModelDrafter {
 public:
  ModelDrafter(const Backend& draft, int64_t sequences, int64_t max_draft, const SamplingOptions& sampling)
      : draft_(draft), max_draft_(max_draft), sampling_(sampling), sequences_(sequences) {
    if (sequences <= 0 || max_draft <= 0) fail("internal: a model drafter for {} sequences of {} tokens", sequences, max_draft);
  }

  Draft operator()(int64_t b, const std::vector<int32_t>& context, int64_t max_tokens) {
    if (b < 0 || b >= static_cast<int64_t>(sequences_.size()))
      fail("internal: draft for sequence {} of {}", b, sequences_.size());
    if (context.empty() || max_tokens <= 0) return {};
    DraftSequence& s = sequences_[b];
    const int64_t V = draft_.config().vocab_size;
    if (!s.session) {
      s.session = std::make_unique<DecodeSession>(draft_, 1);
      s.kept = draft_.new_state(1);
      s.logits.resize(V);
    }
    // Greedy drafts read the argmax alone (reduced where the draft model runs); sampled ones the logits.
    const bool sampled = sampling_.temperature > 0;
    std::vector<float> logits;
    int32_t argmax = 0;
    const TokenOutputs last = sampled ? TokenOutputs(s.logits.data()) : TokenOutputs::argmax_only(&s.argmax);
    if (s.read == 0 || s.read > context.size()) {  // the first call (or a context that shrank): read it whole
      s.session->prefill(0, context.data(), static_cast<int64_t>(context.size()), last);
    } else {  // only the last token's outputs are read
      for (size_t i = s.read; i < context.size(); ++i) s.session->step(&context[i], i + 1 == context.size() ? last : TokenOutputs{});
    }
    s.read = context.size();
    s.kept->copy_all(s.session->state());
    // Greedy drafts, or drafts sampled from the draft model's distribution (kept for the rule).
    Draft d;
    if (sampled) logits = s.logits;
    argmax = s.argmax;
    const int64_t count = std::min(max_draft_, max_tokens);
    for (int64_t k = 0; k < count; ++k) {
      if (k > 0) s.session->step(&d.tokens.back(), sampled ? TokenOutputs(logits.data()) : TokenOutputs::argmax_only(&argmax));
      if (!sampled) {
        d.tokens.push_back(argmax);
        continue;
      }
      // One sort of the logits a token: the distribution, then a draw from it.
      d.distributions.push_back(token_distribution(logits.data(), V, sampling_));
      const uint64_t position = context.size() + k;
      d.tokens.push_back(sample_distribution(
          d.distributions.back(), counter_uniform(sampling_.seed ^ kDraftStream, static_cast<uint64_t>(b), position)));
    }
    s.session->state().copy_all(*s.kept);
    return d;
  }

 private:
  const Backend& draft_;
  int64_t max_draft_;
  SamplingOptions sampling_;
  std::vector<DraftSequence> sequences_;
};

}  // namespace

Drafter model_drafter(const Backend& draft, int64_t sequences, int64_t max_draft, const SamplingOptions& sampling) {
  auto drafter = std::make_shared<ModelDrafter>(draft, sequences, max_draft, sampling);
  return [drafter](int64_t b, const std::vector<int32_t>& context, int64_t max_tokens) {
    return (*drafter)(b, context, max_tokens);
  };
}

}  // namespace ssdq
