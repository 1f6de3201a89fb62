// Quamba2 sort-and-cluster: exact 1-D k-means, a valid within-group permutation, cluster scales
// from the members' maxima, and the obvious split on well-separated maxima.
#include "quant/sort_cluster.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "formats/error.h"
#include "model/quantizer.h"

namespace ssdq {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

double split_cost(const std::vector<double>& v, const std::vector<int64_t>& sizes) {
  double total = 0;
  size_t begin = 0;
  for (int64_t size : sizes) {
    double mean = 0;
    for (size_t i = begin; i < begin + size; ++i) mean += v[i];
    mean /= size;
    for (size_t i = begin; i < begin + size; ++i) total += (v[i] - mean) * (v[i] - mean);
    begin += size;
  }
  return total;
}

TEST(KMeans1d, FindsTheObviousSplit) {
  const std::vector<double> v = {1, 1.1, 1.2, 10, 10.5, 100};
  EXPECT_THAT(kmeans_1d_sorted(v, 3), ElementsAre(3, 2, 1));
  EXPECT_THAT(kmeans_1d_sorted(v, 1), ElementsAre(6));
  EXPECT_THAT(kmeans_1d_sorted(v, 6), ElementsAre(1, 1, 1, 1, 1, 1));
  EXPECT_THAT(kmeans_1d_sorted({0, 0, 0, 0}, 2), ElementsAre(1, 3));  // ties: earliest cluster ends
}

TEST(KMeans1d, IsOptimalAgainstBruteForce) {
  std::mt19937 rng(5);
  std::exponential_distribution<double> dist(1.0);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<double> v(9);
    for (double& x : v) x = dist(rng);
    std::sort(v.begin(), v.end());
    const std::vector<int64_t> sizes = kmeans_1d_sorted(v, 3);
    double best = std::numeric_limits<double>::infinity();
    for (int64_t a = 1; a <= 7; ++a)
      for (int64_t b = 1; a + b <= 8; ++b) best = std::min(best, split_cost(v, {a, b, 9 - a - b}));
    EXPECT_NEAR(split_cost(v, sizes), best, 1e-12) << "trial " << trial;
  }
}

TEST(KMeans1d, RejectsBadInput) {
  EXPECT_THAT([] { kmeans_1d_sorted({1, 2}, 3); },
              ::testing::ThrowsMessage<Error>(HasSubstr("cannot split 2 values into 3 non-empty clusters")));
  EXPECT_THAT([] { kmeans_1d_sorted({2, 1}, 1); },
              ::testing::ThrowsMessage<Error>(HasSubstr("not ascending at index 1")));
}

// Checks every structural promise of a result for maxima `x_absmax`.
void check_result(const SortClusterResult& r, const std::vector<float>& x_absmax, int64_t heads, int64_t headdim,
                  int64_t groups) {
  const int64_t per_group = heads / groups, m = r.head_clusters, n = r.channel_clusters;
  validate_head_permutation(r.permutation, heads, headdim, per_group);  // throws on a bad permutation
  const std::vector<int64_t> gather = channel_gather_index(r.permutation, headdim);
  ASSERT_EQ(r.scales.size(), static_cast<size_t>(groups * m * n));
  // Channels ascending within each head; head maxima ascending within each group.
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t p = 1; p < headdim; ++p)
      EXPECT_LE(x_absmax[gather[h * headdim + p - 1]], x_absmax[gather[h * headdim + p]]);
  for (int64_t h = 1; h < heads; ++h)
    if (h % per_group != 0) {
      EXPECT_LE(x_absmax[gather[h * headdim - 1]], x_absmax[gather[(h + 1) * headdim - 1]]);
    }
  // Sizes tile the heads and the headdim; cluster_of_channel agrees with them.
  for (int64_t g = 0; g < groups; ++g) {
    int64_t head = g * per_group;
    for (int64_t hc = 0; hc < m; ++hc) {
      const int64_t head_count = r.head_cluster_sizes[g * m + hc];
      ASSERT_GE(head_count, 1);
      int64_t p = 0;
      for (int64_t dc = 0; dc < n; ++dc) {
        const int64_t cluster = (g * m + hc) * n + dc, width = r.channel_cluster_sizes[cluster];
        ASSERT_GE(width, 1);
        for (int64_t h = head; h < head + head_count; ++h)
          for (int64_t q = p; q < p + width; ++q) EXPECT_EQ(r.cluster_of_channel[h * headdim + q], cluster);
        p += width;
      }
      EXPECT_EQ(p, headdim);
      head += head_count;
    }
    EXPECT_EQ(head, (g + 1) * per_group);
  }
  // Each scale is the max of its channels' maxima / 127 (1 for an all-zero cluster).
  std::vector<float> cluster_max(r.scales.size(), 0.0f);
  for (int64_t c = 0; c < heads * headdim; ++c)
    cluster_max[r.cluster_of_channel[c]] = std::max(cluster_max[r.cluster_of_channel[c]], x_absmax[gather[c]]);
  for (size_t k = 0; k < r.scales.size(); ++k)
    EXPECT_EQ(r.scales[k], cluster_max[k] > 0 ? cluster_max[k] / 127.0f : 1.0f) << "cluster " << k;
}

TEST(SortCluster, RandomMaximaGiveAValidClustering) {
  const int64_t heads = 16, headdim = 32, groups = 2;
  std::mt19937 rng(9);
  std::lognormal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> maxima(heads * headdim);
  for (float& v : maxima) v = dist(rng);
  const SortClusterResult r = sort_and_cluster(maxima, heads, headdim, groups);
  EXPECT_EQ(r.head_clusters, 4);
  EXPECT_EQ(r.channel_clusters, 4);
  check_result(r, maxima, heads, headdim, groups);
  const SortClusterResult r2 = sort_and_cluster(maxima, heads, headdim, groups, {8, 32});  // one head/channel each
  check_result(r2, maxima, heads, headdim, groups);
  EXPECT_THAT(r2.channel_cluster_sizes, ::testing::Each(1));
}

TEST(SortCluster, WellSeparatedMaximaGiveTheObviousClusters) {
  // 2 groups of 4 heads, headdim 8. Head h has base magnitude base[h]; in every head, channels 1
  // and 6 are 20x larger than the rest.
  const int64_t heads = 8, headdim = 8, groups = 2;
  const float base[heads] = {1.0f, 100.0f, 1.1f, 95.0f, 50.0f, 0.5f, 52.0f, 0.6f};
  std::vector<float> maxima(heads * headdim);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t p = 0; p < headdim; ++p)
      maxima[h * headdim + p] = base[h] * (1.0f + 0.01f * p) * ((p == 1 || p == 6) ? 20.0f : 1.0f);
  const SortClusterResult r = sort_and_cluster(maxima, heads, headdim, groups, {2, 2});
  check_result(r, maxima, heads, headdim, groups);
  EXPECT_THAT(r.permutation.heads, ElementsAre(0, 2, 3, 1, 5, 7, 4, 6));
  EXPECT_THAT(r.head_cluster_sizes, ElementsAre(2, 2, 2, 2));
  EXPECT_THAT(r.channel_cluster_sizes, ::testing::Each(::testing::AnyOf(6, 2)));
  for (size_t k = 0; k < r.channel_cluster_sizes.size(); k += 2) {
    EXPECT_EQ(r.channel_cluster_sizes[k], 6);
    EXPECT_EQ(r.channel_cluster_sizes[k + 1], 2);
  }
  // New head 0 is old head 0: its large channels 1 and 6 come last.
  EXPECT_THAT(std::vector<int64_t>(r.permutation.channels.begin(), r.permutation.channels.begin() + 8),
              ElementsAre(0, 2, 3, 4, 5, 7, 1, 6));
  // Group 0, head cluster 1 (old heads 3 and 1), large channels: max is head 1's channel 6.
  EXPECT_EQ(r.scales[3], 100.0f * 1.06f * 20.0f / 127.0f);
}

TEST(SortCluster, AllZeroClusterHasScaleOne) {
  std::vector<float> maxima(4 * 4, 0.0f);
  maxima[15] = 2.54f;
  const SortClusterResult r = sort_and_cluster(maxima, 4, 4, 1, {2, 2});
  check_result(r, maxima, 4, 4, 1);
  EXPECT_EQ(r.scales[0], 1.0f);
  EXPECT_EQ(r.scales[3], 2.54f / 127.0f);
}

TEST(SortCluster, RejectsBadInput) {
  const std::vector<float> maxima(8 * 4, 1.0f);
  EXPECT_THAT([&] { sort_and_cluster(maxima, 8, 4, 2, {5, 2}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("5 head clusters for 4 heads per group")));
  EXPECT_THAT([&] { sort_and_cluster(maxima, 8, 4, 2, {2, 5}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("5 channel clusters for headdim 4")));
  EXPECT_THAT([&] { sort_and_cluster(maxima, 8, 5, 2); },
              ::testing::ThrowsMessage<Error>(HasSubstr("32 channel maxima for 8 heads of 5 channels")));
  EXPECT_THAT([&] { sort_and_cluster(maxima, 8, 4, 3); },
              ::testing::ThrowsMessage<Error>(HasSubstr("8 heads do not split into 3 groups")));
  std::vector<float> bad = maxima;
  bad[7] = -1.0f;
  EXPECT_THAT([&] { sort_and_cluster(bad, 8, 4, 2, {2, 2}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("channel 7 has maximum -1")));
  bad[7] = std::nanf("");
  EXPECT_THAT([&] { sort_and_cluster(bad, 8, 4, 2, {2, 2}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("channel 7 has maximum nan")));
}

}  // namespace
}  // namespace ssdq
