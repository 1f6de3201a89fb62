#include "runtime/model_drafter.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "formats/error.h"
#include "runtime/decode_session.h"

namespace ssdq {
namespace {

int32_t argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// One sequence's draft session: the context tokens it has read, its state kept while drafting.
struct DraftSequence {
  std::unique_ptr<DecodeSession> session;
  std::unique_ptr<InferenceState> kept;
  size_t read = 0;              // context tokens the session's state has read
  std::vector<float> logits;    // after the last token read
};

class ModelDrafter {
 public:
  ModelDrafter(const Backend& draft, int64_t sequences, int64_t max_draft)
      : draft_(draft), max_draft_(max_draft), sequences_(sequences) {
    if (sequences <= 0 || max_draft <= 0) fail("internal: a model drafter for {} sequences of {} tokens", sequences, max_draft);
  }

  std::vector<int32_t> operator()(int64_t b, const std::vector<int32_t>& context, int64_t max_tokens) {
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
    if (s.read == 0 || s.read > context.size()) {  // the first call (or a context that shrank): read it whole
      s.session->prefill(0, context.data(), static_cast<int64_t>(context.size()), s.logits.data());
    } else {
      for (size_t i = s.read; i < context.size(); ++i) s.session->step(&context[i], s.logits.data());
    }
    s.read = context.size();
    s.kept->copy_all(s.session->state());
    std::vector<int32_t> drafts{argmax(s.logits)};
    std::vector<float> logits(V);
    while (static_cast<int64_t>(drafts.size()) < std::min(max_draft_, max_tokens)) {
      s.session->step(&drafts.back(), logits.data());
      drafts.push_back(argmax(logits));
    }
    s.session->state().copy_all(*s.kept);
    return drafts;
  }

 private:
  const Backend& draft_;
  int64_t max_draft_;
  std::vector<DraftSequence> sequences_;
};

}  // namespace

Drafter model_drafter(const Backend& draft, int64_t sequences, int64_t max_draft) {
  auto drafter = std::make_shared<ModelDrafter>(draft, sequences, max_draft);
  return [drafter](int64_t b, const std::vector<int32_t>& context, int64_t max_tokens) {
    return (*drafter)(b, context, max_tokens);
  };
}

}  // namespace ssdq
