// Shared by the calibration tests (tests/calib, tests/pipeline): two statistics equal point by
// point, and a path in the test's scratch folder.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "calib/calibration_stats.h"

namespace ssdq::calibration_checks {

inline std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

inline void expect_same_stats(const CalibrationStats& a, const CalibrationStats& b) {
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l)
    for (int p = 0; p < kStatPointCount; ++p) {
      const ChannelStats& x = a.layers[l].points[p];
      const ChannelStats& y = b.layers[l].points[p];
      EXPECT_EQ(x.absmax(), y.absmax()) << "layer " << l << " " << stat_point_name(static_cast<StatPoint>(p));
      EXPECT_EQ(x.sums(), y.sums()) << "layer " << l << " " << stat_point_name(static_cast<StatPoint>(p));
      EXPECT_EQ(x.rows(), y.rows());
      EXPECT_EQ(x.histogram(), y.histogram()) << "layer " << l << " " << stat_point_name(static_cast<StatPoint>(p));
      EXPECT_EQ(x.top_values_table(), y.top_values_table())
          << "layer " << l << " " << stat_point_name(static_cast<StatPoint>(p));
    }
}

}  // namespace ssdq::calibration_checks
