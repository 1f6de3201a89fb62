// Static int8 activation formats (model/quantized_model.h ActQuant) from calibrated per-channel
// maxima, one builder per granularity of docs/QUANTIZATION.md ("Recipes"). Scales are scale_from_absmax(max, int8) =
// max / 127 over the channels that share them (1 when that max is 0).
#pragma once

#include <cstdint>
#include <vector>

#include "model/quantized_model.h"

namespace ssdq {

// One scale for every channel.
ActQuant int8_per_tensor(const std::vector<float>& absmax);
// Consecutive segments of the given widths (conv.in: x | B | C), one scale each.
ActQuant int8_per_segment(const std::vector<float>& absmax, const std::vector<int64_t>& widths);
// Groups of `group_width` consecutive channels (B and C per group g: width N).
ActQuant int8_per_group(const std::vector<float>& absmax, int64_t group_width);
// One scale per channel (X_scaled per (h, p)).
ActQuant int8_per_channel(const std::vector<float>& absmax);
// Channel c uses cluster cluster_of_channel[c] of `clusters` (Quamba2's x).
ActQuant int8_per_cluster(const std::vector<float>& absmax, const std::vector<int32_t>& cluster_of_channel,
                          int64_t clusters);
// SSM state [channels, N] (channels = H·P): one scale per channel (max over n; SSDi8 per (h, p)).
ActQuant int8_state_per_channel(const std::vector<float>& state_absmax, int64_t channels, int64_t N);
// SSM state: one scale per (cluster of the channel, n) (Quamba2's cached state).
ActQuant int8_state_per_cluster(const std::vector<float>& state_absmax, const std::vector<int32_t>& cluster_of_channel,
                                int64_t clusters, int64_t N);

}  // namespace ssdq
