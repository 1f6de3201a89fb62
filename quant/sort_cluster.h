// Quamba2 sort-and-cluster for the SSD input x (Quamba2 §4.1, Fig. 4): heads and headdim
// channels are reordered by their calibrated maxima and grouped into m head clusters × n channel
// clusters per B/C group, each with one int8 scale.
//
// The method, per B/C group g (its heads_per_group heads stay in the group):
// 1. each head's channels are sorted ascending by their maxima (stable);
// 2. heads are sorted ascending by their largest channel maximum (stable) and the sorted head
//    maxima are split into m contiguous clusters by exact 1-D k-means;
// 3. in each head cluster, position p of the sorted headdim gets the key max over the cluster's
//    heads of their p-th sorted maximum (non-decreasing in p), and the P keys are split into n
//    contiguous clusters by exact 1-D k-means; the ranges are shared by the heads of the cluster;
// 4. the scale of cluster (g, head cluster, channel cluster) is scale_from_absmax(max of its
//    channels' maxima, int8) = max / 127 (1 for an all-zero cluster).
// Quamba2's code clusters heads with agglomerative (Ward) clustering of their sorted channel
// profiles and channels with k-means from an evenly spaced start; the exact 1-D k-means here is
// optimal for its objective, deterministic, and needs no random start.
#pragma once

#include <cstdint>
#include <vector>

#include "quant/head_permutation.h"

namespace ssdq {

struct SortClusterOptions {
  int64_t head_clusters = 4;     // m, per B/C group; 1 <= m <= heads per group
  int64_t channel_clusters = 4;  // n, per head cluster; 1 <= n <= headdim
};

struct SortClusterResult {
  HeadPermutation permutation;  // apply with reorder_heads (transforms.h)
  int64_t groups = 0, head_clusters = 0, channel_clusters = 0;
  // [G, m]: number of heads in each head cluster; in the new order the clusters of group g are
  // consecutive, starting at head g·heads_per_group.
  std::vector<int64_t> head_cluster_sizes;
  // [G, m, n]: number of headdim positions in each channel cluster; in the new order the clusters
  // of a head are consecutive, starting at position 0, the same for every head of a head cluster.
  std::vector<int64_t> channel_cluster_sizes;
  std::vector<float> scales;                // [G, m, n], index (g·m + head cluster)·n + channel cluster
  std::vector<int32_t> cluster_of_channel;  // [H·P] in the new order: the index into scales
};

// x_absmax: [H·P] calibrated per-channel maxima of the SSD input x in the current channel order
// (finite, >= 0). Fails on bad sizes or options.
SortClusterResult sort_and_cluster(const std::vector<float>& x_absmax, int64_t heads, int64_t headdim, int64_t ngroups,
                                   const SortClusterOptions& options = {});

// Optimal 1-D k-means of ascending `sorted` values into k non-empty contiguous clusters
// (minimum total squared deviation from the cluster means, by dynamic programming); returns the
// k cluster sizes. Among equal-cost splits the one with the earliest cluster ends is taken.
std::vector<int64_t> kmeans_1d_sorted(const std::vector<double>& sorted, int64_t k);

}  // namespace ssdq
