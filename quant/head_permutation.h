// A reordering of the SSD heads and of the headdim channels inside each head (Quamba2's
// cluster-aware reordering), in the form the weight transforms and the runtime's per-cluster
// scales use.
#pragma once

#include <cstdint>
#include <vector>

namespace ssdq {

// Gather form: new head i is old head heads[i]; channel p of new head i is channel
// channels[i·P + p] of old head heads[i]. Heads may only move within their B/C group
// (heads[i] / heads_per_group == i / heads_per_group), which also keeps the gated RMSNorm's
// groups (E/G channels = the heads of one B/C group) intact.
struct HeadPermutation {
  std::vector<int64_t> heads;     // [H]
  std::vector<int64_t> channels;  // [H·P]
};

HeadPermutation identity_head_permutation(int64_t heads, int64_t headdim);

// Fails unless `perm` has sizes [H] and [H·P], both parts are permutations (channels per head)
// and no head leaves its group of heads_per_group consecutive heads.
void validate_head_permutation(const HeadPermutation& perm, int64_t heads, int64_t headdim, int64_t heads_per_group);

// The [H·P] gather index over x channels: new channel c is old channel result[c].
std::vector<int64_t> channel_gather_index(const HeadPermutation& perm, int64_t headdim);

}  // namespace ssdq
