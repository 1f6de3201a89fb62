#include "runtime/backend.h"

#include <algorithm>
#include <typeinfo>

#include "formats/error.h"

namespace ssdq {

namespace {

// A row copy needs a source made by the same kind of backend with the same buffers.
void check_same_layout(const InferenceState& source, const InferenceState& target,
                       const std::vector<StateTensor>& from, const std::vector<StateTensor>& to) {
  if (typeid(source) != typeid(target)) fail("state copy: the source state was made by another backend");
  if (from.size() != to.size()) fail("state copy: the source state has {} buffers, this one {}", from.size(), to.size());
  for (size_t i = 0; i < to.size(); ++i)
    if (from[i].bytes_per_sequence != to[i].bytes_per_sequence)
      fail("state copy: the source state has another layout (buffer {}: {} bytes a sequence, here {})", i,
           from[i].bytes_per_sequence, to[i].bytes_per_sequence);
}

}  // namespace

size_t InferenceState::bytes_per_sequence() const {
  size_t bytes = 0;
  for (const StateTensor& t : tensors()) bytes += t.bytes_per_sequence;
  return bytes;
}

void InferenceState::copy_rows(const InferenceState& source, const std::vector<int64_t>& src_rows,
                               const std::vector<int64_t>& dst_rows) {
  if (src_rows.size() != dst_rows.size())
    fail("state copy: {} source rows but {} destination rows", src_rows.size(), dst_rows.size());
  const std::vector<StateTensor> from = source.tensors(), to = tensors();
  check_same_layout(source, *this, from, to);
  std::vector<bool> written(batch(), false), read(source.batch(), false);
  for (size_t r = 0; r < src_rows.size(); ++r) {
    if (src_rows[r] < 0 || src_rows[r] >= source.batch())
      fail("state copy: source row {} is outside 0..{}", src_rows[r], source.batch() - 1);
    if (dst_rows[r] < 0 || dst_rows[r] >= batch())
      fail("state copy: destination row {} is outside 0..{}", dst_rows[r], batch() - 1);
    if (written[dst_rows[r]]) fail("state copy: destination row {} appears twice", dst_rows[r]);
    written[dst_rows[r]] = true;
    read[src_rows[r]] = true;
  }
  // Within one state, a row both read and overwritten would be read after it changed.
  if (&source == this)
    for (size_t r = 0; r < src_rows.size(); ++r)
      if (src_rows[r] != dst_rows[r] && read[dst_rows[r]])
        fail("state copy within one state: row {} is both a source and a destination", dst_rows[r]);
  for (size_t r = 0; r < src_rows.size(); ++r) {
    if (&source == this && src_rows[r] == dst_rows[r]) continue;
    for (size_t i = 0; i < to.size(); ++i) {
      const size_t n = to[i].bytes_per_sequence;
      copy_bytes(static_cast<char*>(to[i].data) + dst_rows[r] * n,
                 static_cast<const char*>(from[i].data) + src_rows[r] * n, n);
    }
  }
}

void InferenceState::copy_all(const InferenceState& source) {
  if (source.batch() != batch())
    fail("state copy: the source holds {} sequences, this state {}", source.batch(), batch());
  if (&source == this) return;
  const std::vector<StateTensor> from = source.tensors(), to = tensors();
  check_same_layout(source, *this, from, to);
  // Every row at once: one copy per buffer.
  for (size_t i = 0; i < to.size(); ++i) copy_bytes(to[i].data, from[i].data, to[i].bytes_per_sequence * batch());
}

void InferenceState::zero_rows(const std::vector<int64_t>& rows) {
  const std::vector<StateTensor> buffers = tensors();
  for (int64_t row : rows) {
    if (row < 0 || row >= batch()) fail("state zero: row {} is outside 0..{}", row, batch() - 1);
    for (const StateTensor& t : buffers)
      zero_bytes(static_cast<char*>(t.data) + row * t.bytes_per_sequence, t.bytes_per_sequence);
  }
}

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

void Backend::forward_window(const int32_t*, int64_t, InferenceState&, const ForwardOutputs&) const {
  fail("internal: the {} backend has no verify window (runs_window() is false)", name());
}

void Backend::replay_window(InferenceState&, const std::vector<int64_t>&) const {
  fail("internal: the {} backend has no verify window (runs_window() is false)", name());
}

TakenRows taken_rows(const std::vector<int64_t>& from, int64_t batch, const char* what) {
  TakenRows taken;
  if (from.empty()) return taken;
  if (static_cast<int64_t>(from.size()) != batch) fail("{}: {} source rows for a batch of {}", what, from.size(), batch);
  for (int64_t b = 0; b < batch; ++b) {
    if (from[b] == b) continue;
    if (from[b] < 0 || from[b] >= batch || from[from[b]] != from[b])
      fail("{}: row {} takes the tokens of row {}, which is not a row that keeps its own", what, b, from[b]);
    taken.src.push_back(from[b]);
    taken.dst.push_back(b);
  }
  return taken;
}

void Backend::replay_window_from(InferenceState& state, const std::vector<int64_t>& steps,
                                 const std::vector<int64_t>& from) const {
  const TakenRows taken = taken_rows(from, static_cast<int64_t>(steps.size()), "replay");
  std::vector<int64_t> own(steps);
  for (int64_t b : taken.dst) own[b] = 0;
  if (std::any_of(own.begin(), own.end(), [](int64_t n) { return n > 0; })) replay_window(state, own);
  if (!taken.dst.empty()) state.copy_rows(state, taken.src, taken.dst);
}

void Backend::replay_then_window(const std::vector<int64_t>&, const std::vector<int64_t>&, const int32_t*, int64_t,
                                 InferenceState&, const ForwardOutputs&) const {
  fail("internal: the {} backend replays apart from its windows (replays_in_window() is false)", name());
}

}  // namespace ssdq
