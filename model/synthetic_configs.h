// Model shapes for synthetic benchmarks: the official state-spaces Mamba-2 configs (weights
// not needed to measure speed) and an 8B-like config (d_model 4096, 56 layers, ngroups 8).
#pragma once

#include <string>
#include <vector>

#include "formats/config.h"

namespace ssdq {

std::vector<std::string> synthetic_config_names();
// Fails with the list of known names when `name` is not one of them.
Mamba2Config synthetic_config(const std::string& name);

}  // namespace ssdq
