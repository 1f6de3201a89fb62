// The quantized decode GEMV against the specification, runtime/quantized_ops.h linear_forward:
// W8A8 and W4A8 bit for bit (with bias and accumulation into fp32, as out_proj does), W4A16 within
// fp32 summation-order tolerance; rows 1..16, group sizes 32..256, strided inputs, int4 -8.
#include "kernels/qgemv.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "kernels/add_rmsnorm.h"

#include <cstring>

#include "model/quantizer.h"
#include "quant/weight_formats.h"
#include "runtime/quantized_ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace ssdq {
namespace {

struct Case {
  kernels::QgemvKind kind;
  int m, n, k, group_size;
  bool bias_and_accumulate;
  kernels::QgemvSchedule schedule = kernels::QgemvSchedule::kSplitGroups;
  bool mma_layout = false;  // kW8A16 / kW4A16: pack_w8a16_mma_layout's / pack_w4a16_mma_layout's weights (tensor cores)
  // > 0: the launch also fetches this many bytes of another buffer (a next layer's weights) and its
  // own scales into L2 (QgemvArgs::l2_prefetch), which must change nothing.
  int64_t prefetch_bytes = 0;
};

std::string name_of(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  const char* kind = c.kind == kernels::QgemvKind::kW8A8   ? "w8a8"
                     : c.kind == kernels::QgemvKind::kW4A8  ? "w4a8"
                     : c.kind == kernels::QgemvKind::kW4A16 ? "w4a16"
                                                            : "w8a16";
  return fmt::format("{}_m{}_n{}_k{}_g{}{}{}", kind, c.m, c.n, c.k, c.group_size, c.bias_and_accumulate ? "_acc" : "",
                     c.schedule == kernels::QgemvSchedule::kQuad      ? "_quad"
                     : c.schedule == kernels::QgemvSchedule::kSplitK  ? "_splitk"
                     : c.schedule == kernels::QgemvSchedule::kStream  ? "_stream"
                     : c.schedule == kernels::QgemvSchedule::kLaneGroup ? "_lanegroup"
                     : c.schedule == kernels::QgemvSchedule::kMmaTiles ? "_mmatiles"
                     : c.schedule == kernels::QgemvSchedule::kAuto    ? "_auto"
                                                                       : "") +
         (c.mma_layout ? "_mma" : "") + (c.prefetch_bytes ? fmt::format("_prefetch{}", c.prefetch_bytes) : "");
}

// Expects got and expected to hold the same float bits, reporting the first few differences.
void expect_same_bits(const std::vector<float>& got, const std::vector<float>& expected, const char* got_name,
                      const char* expected_name) {
  ASSERT_EQ(got.size(), expected.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &expected[i], sizeof(float)) != 0 && mismatches++ < 5)
      ADD_FAILURE() << "element " << i << ": " << got_name << " " << got[i] << " vs " << expected_name << " "
                    << expected[i];
  EXPECT_EQ(mismatches, 0);
}

class Qgemv : public ::testing::TestWithParam<Case> {};

TEST_P(Qgemv, MatchesTheCpuSpecification) {
  testing::require_device();
  const Case c = GetParam();
  const bool int4 = c.kind == kernels::QgemvKind::kW4A8 || c.kind == kernels::QgemvKind::kW4A16;
  const bool fp16_input = c.kind == kernels::QgemvKind::kW4A16 || c.kind == kernels::QgemvKind::kW8A16;
  std::mt19937 rng(c.m * 131 + c.n * 7 + c.k + c.group_size);
  auto w = testing::random_vector(size_t(c.n) * c.k, -1.f, 1.f, rng);
  WeightMatrix wm = int4 ? rtn_weight(w, c.n, c.k, QuantBits::kInt4, c.group_size)
                         : rtn_weight(w, c.n, c.k, QuantBits::kInt8,
                                      c.kind == kernels::QgemvKind::kW8A16 ? c.group_size : /*per channel*/ 0);
  if (int4)  // GPTQ's error feedback can reach the nibble's -8; make sure the unpacking sees it
    for (size_t i = 0; i < wm.quantized.values.size(); i += 97) wm.quantized.values[i] = -8;

  // Inputs as the quantized runtime holds them: int8 values q·s_x, or fp16-exact floats.
  const int64_t ldx = c.k + (c.m > 1 ? 32 : 0);
  const float s_x = 0.0173f;
  std::vector<int8_t> xq(size_t(c.m) * ldx, 0);
  std::vector<uint16_t> xh(size_t(c.m) * ldx, 0);
  std::vector<float> x(size_t(c.m) * c.k);
  std::uniform_int_distribution<int> q_dist(-127, 127);
  std::uniform_real_distribution<float> f_dist(-2.f, 2.f);
  for (int r = 0; r < c.m; ++r)
    for (int i = 0; i < c.k; ++i) {
      if (fp16_input) {
        xh[r * ldx + i] = float_to_half(f_dist(rng));
        x[r * c.k + i] = half_to_float(xh[r * ldx + i]);
      } else {
        xq[r * ldx + i] = static_cast<int8_t>(q_dist(rng));
        x[r * c.k + i] = dequantize_value(xq[r * ldx + i], s_x);
      }
    }
  ActQuant input = fp16_input ? ActQuant::float16() : ActQuant{ActFormat::kInt8, {s_x}, {}, 1};
  std::vector<float> expected(size_t(c.m) * c.n);
  linear_forward(wm, input, x.data(), c.m, expected.data());
  auto bias = testing::random_vector(c.n, -0.5f, 0.5f, rng);
  auto base = testing::random_vector(size_t(c.m) * c.n, -2.f, 2.f, rng);
  if (c.bias_and_accumulate)  // cpu_block_forward: out += bias, then residual += out
    for (int r = 0; r < c.m; ++r)
      for (int j = 0; j < c.n; ++j) {
        float v = expected[r * c.n + j];
        v += bias[j];
        expected[r * c.n + j] = base[r * c.n + j] + v;
      }

  std::vector<int8_t> w_bytes;
  if (c.mma_layout) {
    w_bytes = c.kind == kernels::QgemvKind::kW4A16 ? kernels::pack_w4a16_mma_layout(wm.quantized.values.data(), c.n, c.k)
                                                  : kernels::pack_w8a16_mma_layout(wm.quantized.values.data(), c.n, c.k);
  } else if (int4) {
    const std::vector<uint8_t> packed = pack_int4(wm.quantized.values.data(), int64_t(c.n) * c.k);
    w_bytes.assign(packed.begin(), packed.end());
  } else {
    w_bytes = wm.quantized.values;
  }
  testing::DeviceBuffer<int8_t> d_w(w_bytes), d_xq(xq);
  testing::DeviceBuffer<uint16_t> d_xh(xh);
  testing::DeviceBuffer<float> d_scales(wm.quantized.scales), d_bias(bias),
      d_out(c.bias_and_accumulate ? base : std::vector<float>(expected.size(), 0.f));
  kernels::QgemvArgs a;
  a.kind = c.kind;
  a.m = c.m;
  a.n = c.n;
  a.k = c.k;
  a.x_int8 = d_xq.get();
  a.x_f16 = reinterpret_cast<const __half*>(d_xh.get());
  a.ldx = ldx;
  a.x_scale = s_x;
  a.w = d_w.get();
  a.w_scales = d_scales.get();
  a.group_size = c.group_size;
  a.bias = c.bias_and_accumulate ? d_bias.get() : nullptr;
  a.out = d_out.get();
  a.ldout = c.n;
  a.out_type = kernels::ElementType::kF32;
  a.accumulate = c.bias_and_accumulate;
  a.schedule = c.schedule;
  a.w_mma_layout = c.mma_layout;
  testing::DeviceBuffer<int8_t> d_next(std::vector<int8_t>(c.prefetch_bytes, 1));
  if (c.prefetch_bytes > 0) {
    a.l2_prefetch[0] = {d_next.get(), c.prefetch_bytes};
    a.l2_prefetch[1] = {d_scales.get(), static_cast<long long>(wm.quantized.scales.size() * sizeof(float) / 16 * 16)};
  }
  ASSERT_TRUE(kernels::qgemv_supported(a));
  ASSERT_EQ(kernels::launch_qgemv(a, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> got = d_out.to_host();
  if (fp16_input) {
    double diff = 0, scale = 0;  // relative to the largest output: the sums cancel to near 0 in places
    for (size_t i = 0; i < got.size(); ++i) {
      diff = std::max(diff, std::abs(double(got[i]) - expected[i]));
      scale = std::max(scale, std::abs(double(expected[i])));
    }
    std::printf("[ %s ] max |gpu - cpu| / max |cpu| = %.2e\n", name_of({c, 0}).c_str(), diff / scale);
    // The tensor cores' fp32 sums are not rounded to nearest at every addition.
    EXPECT_LT(diff / scale, c.mma_layout ? 2e-5 : 2e-6) << "max |Δ| " << diff << " of max " << scale;
    return;
  }
  expect_same_bits(got, expected, "GPU", "CPU");
}

std::vector<Case> cases() {
  std::vector<Case> out;
  using K = kernels::QgemvKind;
  for (K kind : {K::kW8A8, K::kW4A8, K::kW4A16})
    for (int m : {1, 2, 3, 5, 8, 13, 16})
      for (bool acc : {false, true}) {
        out.push_back({kind, m, 37, 256, 128, acc});
        out.push_back({kind, m, 300, 2560, 128, acc});  // 2.7b in_proj's k; 20 groups
      }
  for (K kind : {K::kW4A8, K::kW4A16})
    for (int g : {32, 64, 256}) out.push_back({kind, 3, 129, 1024, g, true});
  // W8A16 (the head-to-toe lm_head at decode): groups of 16 to 512 columns
  for (int m : {1, 2, 5, 16}) out.push_back({K::kW8A16, m, 300, 2560, 128, false});
  for (int g : {16, 64, 512}) out.push_back({K::kW8A16, 3, 129, 1024, g, true});
  // ... and on tensor cores: n not a multiple of 16, one and two n8 tiles of rows, groups 32–512
  for (int m : {1, 2, 8, 9, 16})
    out.push_back({K::kW8A16, m, 300, 2560, 128, false, kernels::QgemvSchedule::kAuto, true});
  for (int g : {32, 512}) out.push_back({K::kW8A16, 3, 129, 1024, g, true, kernels::QgemvSchedule::kAuto, true});
  out.push_back({K::kW8A16, 1, 4096, 4096, 512, false, kernels::QgemvSchedule::kAuto, true});
  out.push_back({K::kW8A8, 1, 4, 8192, 128, true});     // long rows: several rounds per lane
  out.push_back({K::kW4A8, 4, 4, 16384, 128, true});    // 128 groups: four rounds of chain updates
  out.push_back({K::kW4A8, 1, 2000, 5120, 128, true});  // 2.7b out_proj's k
  const size_t split_cases = out.size();
  for (size_t i = 0; i < split_cases; ++i) {
    Case other = out[i];
    if (out[i].kind == K::kW8A16) continue;  // one schedule
    if (out[i].kind == K::kW8A8) {
      other.schedule = kernels::QgemvSchedule::kSplitK;
      if (out[i].m <= 4) {
        Case streamed = out[i];
        streamed.schedule = kernels::QgemvSchedule::kStream;
        out.push_back(streamed);
      }
    } else if (out[i].group_size % 128 == 0) {
      other.schedule = kernels::QgemvSchedule::kQuad;
      if (out[i].m <= 4 && (out[i].kind == K::kW4A16 || out[i].m * out[i].k <= 32 * 1024)) {
        Case streamed = out[i];
        streamed.schedule = kernels::QgemvSchedule::kStream;
        out.push_back(streamed);
      }
    } else {
      continue;
    }
    out.push_back(other);
  }
  out.push_back({K::kW8A8, 5, 2560, 5120, 0, true, kernels::QgemvSchedule::kAuto});  // picks kSplitK
  // W4A16 on tensor cores (the int4 head-to-toe lm_head): n not a multiple of 16, one and two n8
  // tiles of rows, groups 64–1,024, the 8B-like head's k
  for (int m : {1, 2, 8, 9, 16})
    out.push_back({K::kW4A16, m, 300, 2560, 128, false, kernels::QgemvSchedule::kAuto, true});
  for (int g : {64, 256, 1024}) out.push_back({K::kW4A16, 3, 129, 1024, g, true, kernels::QgemvSchedule::kAuto, true});
  out.push_back({K::kW4A16, 1, 4096, 4096, 128, false, kernels::QgemvSchedule::kAuto, true});
  // kStream: more columns than one wave of warps (each walks several), a whole row in one round
  // (k 8192) and in several (k 16384), 1–4 rows
  for (int m : {1, 2, 4}) {
    out.push_back({K::kW8A8, m, 40000, 512, 0, true, kernels::QgemvSchedule::kStream});
    out.push_back({K::kW8A8, m, 300, 8192, 0, false, kernels::QgemvSchedule::kStream});
  }
  out.push_back({K::kW8A8, 1, 129, 16384, 0, true, kernels::QgemvSchedule::kStream});
  // The int4 kStream (W4A8 on rearranged shared rows, W4A16 on fp16 rows in memory): groups of 32
  // to 1,024 columns (1 to 32 lanes a group), k 8192 in one round of eight pieces a lane and 16384
  // in two, a partial last round (k 2560: 80 pieces), many columns
  for (K kind : {K::kW4A8, K::kW4A16}) {
    for (int g : {32, 64, 256, 1024}) out.push_back({kind, 3, 129, 4096, g, true, kernels::QgemvSchedule::kStream});
    out.push_back({kind, 2, 300, 8192, 128, false, kernels::QgemvSchedule::kStream});
    out.push_back({kind, 1, 129, 16384, 128, true, kernels::QgemvSchedule::kStream});
    for (int m : {1, 4}) out.push_back({kind, m, 40000, 2560, 128, true, kernels::QgemvSchedule::kStream});
  }
  // ... five pieces a lane: 2.7b's out_proj k for both kinds, and k 4608, whose fifth round is half
  // a row's worth of lanes
  for (K kind : {K::kW4A8, K::kW4A16}) {
    out.push_back({kind, 1, 300, 5120, 128, true, kernels::QgemvSchedule::kStream});
    for (int m : {1, 2}) out.push_back({kind, m, 129, 4608, 128, false, kernels::QgemvSchedule::kStream});
  }
  // ... and four rows of 2.7b's and 8B-like's out_proj k (20 and 32 KB of rearranged rows)
  out.push_back({K::kW4A8, 4, 300, 5120, 128, true, kernels::QgemvSchedule::kStream});
  out.push_back({K::kW4A8, 4, 300, 8192, 128, true, kernels::QgemvSchedule::kStream});
  // kLaneGroup (W4A8, groups of 128): one group a lane (k ≤ 4,096: 4 to 32 groups, some lanes idle) or
  // two (k 5,120: the second only in 8 lanes; 8,192), 1–4 rows, more columns than one wave of warps
  for (int m : {1, 2, 3, 4})
    for (int k : {512, 2560, 4096, 5120, 8192})
      out.push_back({K::kW4A8, m, m == 1 ? 40000 : 300, k, 128, m % 2 == 1, kernels::QgemvSchedule::kLaneGroup});
  // kMmaTiles (W4A8, groups of 128, tensor cores): 1–4 rows, 4 groups to 64, column counts that
  // leave the last 16-column tile ragged, fewer tiles than SMs, and several tiles a warp (40,000)
  for (int m : {1, 2, 3, 4})
    for (int k : {512, 2560, 4096, 8192})
      for (int n : {37, 300})
        out.push_back({K::kW4A8, m, n, k, 128, (m + n) % 2 == 1, kernels::QgemvSchedule::kMmaTiles});
  out.push_back({K::kW4A8, 1, 40000, 2560, 128, true, kernels::QgemvSchedule::kMmaTiles});
  out.push_back({K::kW4A8, 1, 10576, 2560, 128, false, kernels::QgemvSchedule::kMmaTiles});  // 2.7b in_proj
  out.push_back({K::kW4A8, 2, 18560, 4096, 128, false, kernels::QgemvSchedule::kMmaTiles});  // 8B-like in_proj
  out.push_back({K::kW4A8, 4, 10576, 2560, 128, true, kernels::QgemvSchedule::kAuto});  // picks kMmaTiles on sm_90
  out.push_back({K::kW4A8, 1, 300, 16384, 128, false, kernels::QgemvSchedule::kMmaTiles});  // one 140 KB slot
  for (K kind : {K::kW4A8, K::kW4A16}) {
    out.push_back({kind, 2, 77, 2048, 512, true, kernels::QgemvSchedule::kQuad});
    out.push_back({kind, 1, 8200, 2560, 128, true, kernels::QgemvSchedule::kAuto});  // picks kQuad
  }
  // Every one-row schedule with L2 prefetch ranges: fewer bytes than the grid has blocks (most
  // blocks issue none), and a range no block count divides.
  const size_t plain_cases = out.size();
  for (size_t i = 0; i < plain_cases; ++i)
    if (out[i].m == 1 && (out[i].n == 300 || out[i].n == 40000))
      for (int64_t bytes : {int64_t{16}, int64_t{(3 << 20) + 48}}) {
        Case prefetching = out[i];
        prefetching.prefetch_bytes = bytes;
        out.push_back(prefetching);
      }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, Qgemv, ::testing::ValuesIn(cases()), name_of);

// The norm prologue builds the int8 input add_rmsnorm would write (same bits), so the fused
// projection equals add_rmsnorm → qgemv bit for bit, for every kernel that can take it.
struct NormCase {
  kernels::QgemvKind kind;
  int m, n, k;
  kernels::QgemvSchedule schedule;
};

class QgemvNormPrologue : public ::testing::TestWithParam<NormCase> {};

TEST_P(QgemvNormPrologue, EqualsTheNormKernelThenTheGemv) {
  testing::require_device();
  const NormCase c = GetParam();
  const int group_size = 128;
  std::mt19937 rng(c.m * 17 + c.n + c.k);
  std::vector<int8_t> w_bytes(c.kind == kernels::QgemvKind::kW8A8 ? size_t(c.n) * c.k : size_t(c.n) * c.k / 2);
  std::uniform_int_distribution<int> byte(-128, 127);
  for (int8_t& b : w_bytes) b = static_cast<int8_t>(byte(rng));
  const int groups = c.kind == kernels::QgemvKind::kW8A8 ? 1 : c.k / group_size;
  auto scales = testing::random_vector(size_t(c.n) * groups, 0.001f, 0.01f, rng);
  auto residual = testing::random_vector(size_t(c.m) * c.k, -3.f, 3.f, rng);
  auto weight = testing::random_vector(c.k, 0.5f, 1.5f, rng);
  const float s_x = 0.021f;  // some values saturate
  testing::DeviceBuffer<int8_t> d_w(w_bytes), d_x(std::vector<int8_t>(size_t(c.m) * c.k));
  testing::DeviceBuffer<float> d_scales(scales), d_residual(residual), d_weight(weight),
      d_unfused(std::vector<float>(size_t(c.m) * c.n)), d_fused(std::vector<float>(size_t(c.m) * c.n));

  kernels::AddRmsNormArgs norm;
  norm.rows = c.m;
  norm.dim = c.k;
  norm.eps = 1e-5f;
  norm.residual = d_residual.get();
  norm.weight = d_weight.get();
  norm.out = d_x.get();
  norm.out_type = kernels::ElementType::kS8;
  norm.out_scale = s_x;
  ASSERT_EQ(kernels::launch_add_rmsnorm(norm, nullptr), cudaSuccess);

  kernels::QgemvArgs a;
  a.kind = c.kind;
  a.m = c.m;
  a.n = c.n;
  a.k = c.k;
  a.x_int8 = d_x.get();
  a.ldx = c.k;
  a.x_scale = s_x;
  a.w = d_w.get();
  a.w_scales = d_scales.get();
  a.group_size = group_size;
  a.out = d_unfused.get();
  a.ldout = c.n;
  a.schedule = c.schedule;
  ASSERT_TRUE(kernels::qgemv_supported(a));
  ASSERT_EQ(kernels::launch_qgemv(a, nullptr), cudaSuccess);
  a.x_int8 = nullptr;
  a.norm_residual = d_residual.get();
  a.norm_weight = d_weight.get();
  a.norm_eps = 1e-5f;
  a.out = d_fused.get();
  ASSERT_TRUE(kernels::qgemv_supported(a));
  ASSERT_EQ(kernels::launch_qgemv(a, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_same_bits(d_fused.to_host(), d_unfused.to_host(), "fused", "unfused");
}

std::vector<NormCase> norm_cases() {
  using K = kernels::QgemvKind;
  using S = kernels::QgemvSchedule;
  std::vector<NormCase> out;
  for (int m : {1, 3, 16}) {
    out.push_back({K::kW8A8, m, 300, 2560, S::kSplitGroups});
    out.push_back({K::kW8A8, m, 300, 2560, S::kSplitK});
    if (m <= 4) out.push_back({K::kW8A8, m, 300, 2560, S::kStream});
    out.push_back({K::kW4A8, m, 300, 2560, S::kSplitGroups});
    out.push_back({K::kW4A8, m, 300, 2560, S::kQuad});
    if (m <= 4) out.push_back({K::kW4A8, m, 300, 2560, S::kStream});
  }
  out.push_back({K::kW4A8, 4, 300, 8192, S::kStream});  // 32 KB of rows rearranged from the norm
  for (int m : {1, 3}) out.push_back({K::kW4A8, m, 300, 2560, S::kLaneGroup});
  out.push_back({K::kW4A8, 4, 300, 8192, S::kLaneGroup});
  out.push_back({K::kW4A8, 1, 18560, 4096, S::kLaneGroup});  // 8B-like in_proj: several columns a warp
  for (int m : {1, 3}) out.push_back({K::kW4A8, m, 300, 2560, S::kMmaTiles});
  out.push_back({K::kW4A8, 1, 18560, 4096, S::kMmaTiles});
  out.push_back({K::kW4A8, 4, 300, 8192, S::kMmaTiles});
  // One row at k ≤ 4,096 runs 512-thread blocks, whose first 256 threads alone sum the RMS: the
  // 8B-like in_proj, and a k that leaves the prologue's last batch ragged (1,040 = 2·512 + 16)
  out.push_back({K::kW8A8, 1, 18560, 4096, S::kStream});
  out.push_back({K::kW8A8, 1, 1000, 1040, S::kStream});
  out.push_back({K::kW8A8, 16, 64, 4096, S::kAuto});  // 64 KB of shared input rows: the opt-in
  out.push_back({K::kW8A8, 4, 20000, 8192, S::kStream});  // 32 KB of rows, several columns a warp
  out.push_back({K::kW4A8, 2, 70, 1152, S::kQuad});  // 9 groups: k not a multiple of 256
  // 32 KB of rows plus the kernel's 16 KB of static shared memory: over 48 KB only together
  out.push_back({K::kW4A8, 16, 300, 2048, S::kSplitGroups});
  return out;
}

std::string norm_name(const ::testing::TestParamInfo<NormCase>& info) {
  const NormCase& c = info.param;
  return fmt::format("{}_m{}_n{}_k{}_s{}", c.kind == kernels::QgemvKind::kW8A8 ? "w8a8" : "w4a8", c.m, c.n, c.k,
                     static_cast<int>(c.schedule));
}

INSTANTIATE_TEST_SUITE_P(Shapes, QgemvNormPrologue, ::testing::ValuesIn(norm_cases()), norm_name);

TEST(Qgemv, RefusesWhatItCannotRun) {
  kernels::QgemvArgs a;
  a.kind = kernels::QgemvKind::kW4A8;
  a.m = 1;
  a.n = 8;
  a.k = 256;
  a.group_size = 96;  // not a power-of-two number of 32-column pieces
  alignas(16) static int8_t dummy[4096];
  static float scales[64];
  a.x_int8 = dummy;
  a.ldx = 256;
  a.w = dummy;
  a.w_scales = scales;
  a.out = scales;
  a.ldout = 8;
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.group_size = 128;
  EXPECT_TRUE(kernels::qgemv_supported(a));
  a.m = 17;
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.m = 16;
  a.k = 8192;  // the norm prologue's input rows would not fit in shared memory
  a.norm_residual = scales;
  a.norm_weight = scales;
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.norm_residual = nullptr;
  a.k = 256;
  a.m = 1;
  a.out_type = kernels::ElementType::kBF16;
  a.accumulate = true;
  EXPECT_FALSE(kernels::qgemv_supported(a));
  EXPECT_EQ(kernels::launch_qgemv(a, nullptr), cudaErrorInvalidValue);
  a.out_type = kernels::ElementType::kF32;
  a.accumulate = false;
  EXPECT_TRUE(kernels::qgemv_supported(a));
  alignas(16) static int8_t next_weights[64];
  a.l2_prefetch[0] = {next_weights + 8, 32};  // bulk prefetches take 16-byte aligned ranges
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.l2_prefetch[0] = {next_weights, 40};
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.l2_prefetch[0] = {nullptr, 32};
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.l2_prefetch[0] = {next_weights, -16};
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.l2_prefetch[0] = {next_weights, 64};
  EXPECT_TRUE(kernels::qgemv_supported(a));
  a.l2_prefetch[1] = {next_weights + 8, 16};  // every range is checked
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.l2_prefetch[0] = a.l2_prefetch[1] = {};
  a.w_mma_layout = true;  // the tensor-core layouts are the fp16-input kinds' only
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.kind = kernels::QgemvKind::kW4A16;
  a.x_f16 = reinterpret_cast<const __half*>(dummy);
  a.group_size = 32;  // int4 on tensor cores: 64-column steps of a lane's load
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.group_size = 64;
  EXPECT_TRUE(kernels::qgemv_supported(a));
  a.kind = kernels::QgemvKind::kW4A8;
  a.group_size = 128;
  a.w_mma_layout = false;
  a.schedule = kernels::QgemvSchedule::kStream;  // W8A8 and the int4 kinds, at most 4 rows
  EXPECT_TRUE(kernels::qgemv_supported(a));
  a.k = a.ldx = 8192;
  a.m = 4;  // 32 KB of W4A8 rows: the most its rearranged input takes
  EXPECT_TRUE(kernels::qgemv_supported(a));
  a.k = a.ldx = 16384;
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.k = a.ldx = 256;
  a.m = 1;
  a.kind = kernels::QgemvKind::kW4A16;
  a.x_f16 = reinterpret_cast<const __half*>(dummy);
  EXPECT_TRUE(kernels::qgemv_supported(a));
  a.kind = kernels::QgemvKind::kW8A16;  // W8A8 and the int4 kinds only
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.kind = kernels::QgemvKind::kW8A8;
  EXPECT_TRUE(kernels::qgemv_supported(a));
  a.m = 5;
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.m = 1;
  a.schedule = kernels::QgemvSchedule::kLaneGroup;  // W4A8, groups of 128, k a multiple of 512 up to 8,192, m ≤ 4
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.kind = kernels::QgemvKind::kW4A8;
  a.group_size = 128;
  a.k = a.ldx = 512;
  EXPECT_TRUE(kernels::qgemv_supported(a));
  a.k = a.ldx = 8192;
  a.m = 4;
  EXPECT_TRUE(kernels::qgemv_supported(a));
  a.m = 5;
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.m = 1;
  a.k = a.ldx = 16384;  // 128 groups: more than two a lane
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.k = a.ldx = 1280;  // not a multiple of 512
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.k = a.ldx = 2048;
  a.group_size = 256;
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.schedule = kernels::QgemvSchedule::kMmaTiles;  // W4A8, groups of 128, k a multiple of 512, m ≤ 4, m·k ≤ 32 KB
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.group_size = 128;
  a.k = a.ldx = 1536;
  int major = 0;  // and an sm_90 device (bulk copies)
  const bool sm90 = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess && major >= 9;
  EXPECT_EQ(kernels::qgemv_supported(a), sm90);
  a.k = a.ldx = 1280;  // not a multiple of 512
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.k = a.ldx = 8192;
  a.m = 4;
  EXPECT_EQ(kernels::qgemv_supported(a), sm90);
  a.m = 5;
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.m = 1;
  a.k = a.ldx = 16384;  // a 16-column tile of 140 KB: the most its shared memory takes
  EXPECT_EQ(kernels::qgemv_supported(a), sm90);
  a.k = a.ldx = 32768;  // 279 KB
  EXPECT_FALSE(kernels::qgemv_supported(a));
  a.k = a.ldx = 32768 + 512;  // the rearranged row would pass 32 KB
  EXPECT_FALSE(kernels::qgemv_supported(a));
}

}  // namespace
}  // namespace ssdq
