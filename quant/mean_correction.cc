#include "quant/mean_correction.h"

#include <cmath>

#include "formats/error.h"

namespace ssdq {

std::vector<float> mean_correction(const std::vector<float>& fp_mean, const std::vector<float>& quantized_mean,
                                   double eta) {
  if (fp_mean.size() != quantized_mean.size())
    fail("mean correction: the FP mean has {} channels, the quantized mean {}", fp_mean.size(), quantized_mean.size());
  if (!(eta >= 0) || !std::isfinite(eta)) fail("mean correction: eta {} is not a finite value >= 0", eta);
  std::vector<float> c(fp_mean.size());
  for (size_t i = 0; i < c.size(); ++i)
    c[i] = static_cast<float>(eta * (static_cast<double>(fp_mean[i]) - quantized_mean[i]));
  return c;
}

}  // namespace ssdq
