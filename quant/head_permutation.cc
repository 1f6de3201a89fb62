#include "quant/head_permutation.h"

#include "formats/error.h"

namespace ssdq {
namespace {

// Fails unless values[0..count) is a permutation of 0..count-1.
void check_permutation(const int64_t* values, int64_t count, const char* what) {
  std::vector<bool> seen(count, false);
  for (int64_t i = 0; i < count; ++i) {
    if (values[i] < 0 || values[i] >= count) fail("head permutation: {} entry {} is {}, outside 0..{}", what, i, values[i], count - 1);
    if (seen[values[i]]) fail("head permutation: {} repeats {} at entry {}", what, values[i], i);
    seen[values[i]] = true;
  }
}

}  // namespace

HeadPermutation identity_head_permutation(int64_t heads, int64_t headdim) {
  HeadPermutation perm;
  perm.heads.resize(heads);
  perm.channels.resize(heads * headdim);
  for (int64_t h = 0; h < heads; ++h) perm.heads[h] = h;
  for (int64_t c = 0; c < heads * headdim; ++c) perm.channels[c] = c % headdim;
  return perm;
}

void validate_head_permutation(const HeadPermutation& perm, int64_t heads, int64_t headdim, int64_t heads_per_group) {
  if (heads <= 0 || headdim <= 0 || heads_per_group <= 0 || heads % heads_per_group != 0)
    fail("head permutation: invalid dims (heads {}, headdim {}, heads per group {})", heads, headdim, heads_per_group);
  if (static_cast<int64_t>(perm.heads.size()) != heads || static_cast<int64_t>(perm.channels.size()) != heads * headdim)
    fail("head permutation: sizes {} and {} do not match {} heads of {} channels", perm.heads.size(), perm.channels.size(),
         heads, headdim);
  check_permutation(perm.heads.data(), heads, "heads");
  for (int64_t h = 0; h < heads; ++h) {
    if (perm.heads[h] / heads_per_group != h / heads_per_group)
      fail("head permutation: head {} moves to position {}, outside its B/C group of {} heads", perm.heads[h], h,
           heads_per_group);
    check_permutation(perm.channels.data() + h * headdim, headdim, "channels of a head");
  }
}

std::vector<int64_t> channel_gather_index(const HeadPermutation& perm, int64_t headdim) {
  std::vector<int64_t> index(perm.channels.size());
  for (size_t c = 0; c < index.size(); ++c) index[c] = perm.heads[c / headdim] * headdim + perm.channels[c];
  return index;
}

}  // namespace ssdq
