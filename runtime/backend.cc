#include "runtime/backend.h"

#include "formats/error.h"

namespace ssdq {

ForwardOutputs ForwardOutputs::for_sequence(int64_t b, int64_t length, int64_t vocab) const {
  const int64_t r = rows(length);
  ForwardOutputs one = *this;
  if (one.logits) one.logits += b * r * vocab;
  if (one.argmax) one.argmax += b * r;
  if (one.targets) one.targets += b * r;
  if (one.nll) one.nll += b * r;
  return one;
}

void check_forward_ids(const int32_t* tokens, int64_t batch, int64_t length, int64_t vocab,
                       const ForwardOutputs& outputs) {
  for (int64_t i = 0; i < batch * length; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      fail("token id {} at position {} is outside the vocabulary (0..{})", tokens[i], i, vocab - 1);
  if (outputs.nll && !outputs.targets) fail("internal: nll requested without targets");
  if (!outputs.targets) return;
  for (int64_t i = 0; i < batch * outputs.rows(length); ++i)
    if (outputs.targets[i] < 0 || outputs.targets[i] >= vocab)
      fail("target id {} at position {} is outside the vocabulary (0..{})", outputs.targets[i], i, vocab - 1);
}

}  // namespace ssdq
