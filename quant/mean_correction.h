// SSDi8's mean correction (§4.2 eq. 10, Appendix B Algorithm 1): a bias c added to the output of a
// quantized out_proj, c = η·(μ_fp − μ_q), where μ_fp is the FP model's per-channel mean of that
// output and μ_q the quantized model's, measured on the calibration samples after the corrections
// of all earlier layers (sequential). The closed-form least-squares correction is η = 1; the paper
// damps it to η = 0.15 against overfitting the calibration set.
#pragma once

#include <vector>

namespace ssdq {

std::vector<float> mean_correction(const std::vector<float>& fp_mean, const std::vector<float>& quantized_mean,
                                   double eta);

}  // namespace ssdq
