#include "quant/sort_cluster.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "formats/error.h"
#include "model/quantizer.h"

namespace ssdq {
namespace {

// Indices 0..count-1 ordered by ascending key, ties by index.
std::vector<int64_t> ascending_order(const float* key, int64_t count) {
  std::vector<int64_t> order(count);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return key[a] < key[b]; });
  return order;
}

}  // namespace

std::vector<int64_t> kmeans_1d_sorted(const std::vector<double>& v, int64_t k) {
  const int64_t n = static_cast<int64_t>(v.size());
  if (k < 1 || k > n) fail("kmeans_1d: cannot split {} values into {} non-empty clusters", n, k);
  for (int64_t i = 1; i < n; ++i)
    if (!(v[i - 1] <= v[i])) fail("kmeans_1d: values are not ascending at index {}", i);
  std::vector<double> sum(n + 1, 0), sum_sq(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    sum[i + 1] = sum[i] + v[i];
    sum_sq[i + 1] = sum_sq[i] + v[i] * v[i];
  }
  auto cost = [&](int64_t i, int64_t j) {  // squared deviation of v[i..j) from its mean
    const double s = sum[j] - sum[i];
    return std::max(0.0, sum_sq[j] - sum_sq[i] - s * s / static_cast<double>(j - i));
  };
  const double inf = std::numeric_limits<double>::infinity();
  // best[c][j]: least cost of v[0..j) in c clusters; start[c][j]: where its last cluster begins.
  std::vector<std::vector<double>> best(k + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int64_t>> start(k + 1, std::vector<int64_t>(n + 1, 0));
  best[0][0] = 0;
  for (int64_t c = 1; c <= k; ++c)
    for (int64_t j = c; j <= n; ++j)
      for (int64_t i = c - 1; i < j; ++i) {
        const double total = best[c - 1][i] + cost(i, j);
        if (total < best[c][j]) {
          best[c][j] = total;
          start[c][j] = i;
        }
      }
  std::vector<int64_t> sizes(k);
  for (int64_t c = k, end = n; c >= 1; --c) {
    sizes[c - 1] = end - start[c][end];
    end = start[c][end];
  }
  return sizes;
}

SortClusterResult sort_and_cluster(const std::vector<float>& x_absmax, int64_t heads, int64_t headdim, int64_t ngroups,
                                   const SortClusterOptions& options) {
  if (heads <= 0 || headdim <= 0 || ngroups <= 0 || heads % ngroups != 0)
    fail("sort_and_cluster: {} heads do not split into {} groups (headdim {})", heads, ngroups, headdim);
  const int64_t per_group = heads / ngroups, m = options.head_clusters, n = options.channel_clusters;
  if (static_cast<int64_t>(x_absmax.size()) != heads * headdim)
    fail("sort_and_cluster: {} channel maxima for {} heads of {} channels", x_absmax.size(), heads, headdim);
  if (m < 1 || m > per_group) fail("sort_and_cluster: {} head clusters for {} heads per group", m, per_group);
  if (n < 1 || n > headdim) fail("sort_and_cluster: {} channel clusters for headdim {}", n, headdim);
  for (size_t c = 0; c < x_absmax.size(); ++c)
    if (!std::isfinite(x_absmax[c]) || x_absmax[c] < 0)
      fail("sort_and_cluster: channel {} has maximum {}, expected a finite value >= 0", c, x_absmax[c]);

  SortClusterResult out;
  out.groups = ngroups;
  out.head_clusters = m;
  out.channel_clusters = n;
  out.permutation.heads.resize(heads);
  out.permutation.channels.resize(heads * headdim);
  out.head_cluster_sizes.resize(ngroups * m);
  out.channel_cluster_sizes.resize(ngroups * m * n);
  out.scales.resize(ngroups * m * n);
  out.cluster_of_channel.resize(heads * headdim);

  // Step 1: per (old) head, its channels in ascending order and its largest maximum.
  std::vector<int64_t> channel_order(heads * headdim);
  std::vector<float> head_max(heads);
  for (int64_t h = 0; h < heads; ++h) {
    const float* maxima = x_absmax.data() + h * headdim;
    const std::vector<int64_t> order = ascending_order(maxima, headdim);
    std::copy(order.begin(), order.end(), channel_order.begin() + h * headdim);
    head_max[h] = maxima[order.back()];
  }
  auto sorted_max = [&](int64_t old_head, int64_t p) {
    return x_absmax[old_head * headdim + channel_order[old_head * headdim + p]];
  };

  for (int64_t g = 0; g < ngroups; ++g) {
    const int64_t first = g * per_group;
    // Step 2: heads of the group by ascending maximum, then head clusters.
    const std::vector<int64_t> order = ascending_order(head_max.data() + first, per_group);
    std::vector<double> sorted_heads(per_group);
    for (int64_t i = 0; i < per_group; ++i) {
      const int64_t old_head = first + order[i];
      out.permutation.heads[first + i] = old_head;
      std::copy(channel_order.begin() + old_head * headdim, channel_order.begin() + (old_head + 1) * headdim,
                out.permutation.channels.begin() + (first + i) * headdim);
      sorted_heads[i] = head_max[old_head];
    }
    const std::vector<int64_t> head_sizes = kmeans_1d_sorted(sorted_heads, m);
    // Step 3 and 4: per head cluster, channel clusters over the shared sorted positions.
    for (int64_t hc = 0, head_begin = first; hc < m; head_begin += head_sizes[hc], ++hc) {
      out.head_cluster_sizes[g * m + hc] = head_sizes[hc];
      const int64_t head_end = head_begin + head_sizes[hc];
      std::vector<double> keys(headdim, 0);
      for (int64_t i = head_begin; i < head_end; ++i)
        for (int64_t p = 0; p < headdim; ++p) keys[p] = std::max<double>(keys[p], sorted_max(out.permutation.heads[i], p));
      const std::vector<int64_t> channel_sizes = kmeans_1d_sorted(keys, n);
      for (int64_t dc = 0, p_begin = 0; dc < n; p_begin += channel_sizes[dc], ++dc) {
        const int64_t cluster = (g * m + hc) * n + dc;
        out.channel_cluster_sizes[cluster] = channel_sizes[dc];
        float cluster_max = 0;
        for (int64_t i = head_begin; i < head_end; ++i)
          for (int64_t p = p_begin; p < p_begin + channel_sizes[dc]; ++p) {
            cluster_max = std::max(cluster_max, sorted_max(out.permutation.heads[i], p));
            out.cluster_of_channel[i * headdim + p] = static_cast<int32_t>(cluster);
          }
        out.scales[cluster] = scale_from_absmax(cluster_max, QuantBits::kInt8);
      }
    }
  }
  return out;
}

}  // namespace ssdq
