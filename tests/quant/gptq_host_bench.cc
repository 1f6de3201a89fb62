// What the host does around a GPU export's GPTQ (benchmark, not a test): a pass's Gram added into
// the layer's, its Hessian (InputGram::hessian), and gptq_quantize with the device's part — the
// factor and the row pass in one call — replaced by a stand-in that costs nothing, so what is
// timed is the host's preparing, copying and remapping that export --device cuda pays per
// projection. Shapes: in_proj and out_proj of
// the official 1.3b and 2.7b (rows × columns), or those given as ROWSxCOLS arguments.
//
//   bazel run -c opt //tests/quant:gptq_host_bench [-- 8512x2048 2048x4096 ...]
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "calib/input_gram.h"
#include "quant/gptq.h"
#include "runtime/parallel.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void time_shape(int64_t rows, int64_t cols) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  // A Gram of 4 · cols random rows, summed as the device leaves it (column-major lower triangle).
  std::vector<float> x(256 * cols);  // rank 256: the stand-in factor never needs it invertible
  for (float& v : x) v = normal(rng);
  const int64_t x_rows = static_cast<int64_t>(x.size()) / cols;
  std::vector<double> sum(cols * cols, 0.0);
  for (int64_t r = 0; r < x_rows; ++r) {
    const float* row = x.data() + r * cols;
    ssdq::parallel_for(cols, [&](int64_t c) {
      for (int64_t i = c; i < cols; ++i) sum[c * cols + i] += double(row[i]) * row[c];
    });
  }
  // A pass's Gram as it comes back from the device (fp32), into the layer's Gram: as a fp64 copy
  // merged on one thread (before), and added over the cores (InputGram::add_sums, now).
  const std::vector<float> device_sums(sum.begin(), sum.end());
  auto start = std::chrono::steady_clock::now();
  ssdq::InputGram merged(cols);
  merged.merge(ssdq::InputGram::from_sums(cols, x_rows, std::vector<double>(device_sums.begin(), device_sums.end())));
  const double merge_s = seconds_since(start);
  start = std::chrono::steady_clock::now();
  ssdq::InputGram gram(cols);
  gram.add_sums(device_sums.data(), x_rows, ssdq::parallel_for);
  const double add_s = seconds_since(start);
  start = std::chrono::steady_clock::now();
  const std::vector<double> h_one = merged.hessian();
  const double hessian_one_s = seconds_since(start);
  start = std::chrono::steady_clock::now();
  const std::vector<double> h = std::move(gram).hessian(ssdq::parallel_for);
  const double hessian_s = seconds_since(start);
  if (h != h_one) fmt::print(stderr, "gptq_host_bench: the Hessians over the cores and on one thread differ\n");
  fmt::print("{:>5} × {:>5}: the device's Gram into the layer's: {:.3f} s merged as fp64 on one thread, {:.3f} s added "
             "over the cores; its Hessian: {:.3f} s on one thread in a copy, {:.3f} s over the cores in place\n",
             rows, cols, merge_s, add_s, hessian_one_s, hessian_s);

  std::vector<float> w(rows * cols);
  for (float& v : w) v = normal(rng);
  // GPTQ as export --device cuda runs it: the factor and the row pass in one device call
  // (GptqOptions::factored_row_pass), here a stand-in that costs nothing; the Hessian copied in
  // (a caller that keeps it) and moved in (export's).
  ssdq::GptqOptions o;
  o.parallel_for = ssdq::parallel_for;
  int64_t calls = 0;
  o.factored_row_pass = [&](const std::vector<double>&, const ssdq::GptqRowPassJob& job) {
    ++calls;
    std::fill(job.values, job.values + job.rows * job.cols, int8_t{1});
    return true;
  };
  start = std::chrono::steady_clock::now();
  const ssdq::QuantizedMatrix copied = ssdq::gptq_quantize(w.data(), rows, cols, h, o);
  const double copied_s = seconds_since(start);
  std::vector<double> h_moved = h;
  start = std::chrono::steady_clock::now();
  const ssdq::QuantizedMatrix moved = ssdq::gptq_quantize(w.data(), rows, cols, std::move(h_moved), o);
  const double moved_s = seconds_since(start);
  fmt::print("{:>6} x {:<6} GPTQ's host part around the device's call: {:6.3f} s with the Hessian copied in, "
             "{:6.3f} s moved in ({} calls, {} codes)\n",
             rows, cols, copied_s, moved_s, calls, copied.values.size() + moved.values.size());
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::pair<int64_t, int64_t>> shapes = {{8512, 2048}, {2048, 4096}, {10576, 2560}, {2560, 5120}};
  if (argc > 1) {
    shapes.clear();
    for (int i = 1; i < argc; ++i) {
      long long r = 0, c = 0;
      if (std::sscanf(argv[i], "%lldx%lld", &r, &c) != 2 || r <= 0 || c <= 0) {
        fmt::print(stderr, "gptq_host_bench: '{}' is not ROWSxCOLS\n", argv[i]);
        return 2;
      }
      shapes.emplace_back(r, c);
    }
  }
  fmt::print("{} threads\n", ssdq::thread_count());
  for (const auto& [rows, cols] : shapes) time_shape(rows, cols);
  return 0;
}
