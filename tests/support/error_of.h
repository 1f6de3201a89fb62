// The message of the ssdq::Error an action throws, or "(no error)": tests match parts of it.
#pragma once

#include <functional>
#include <string>

#include "formats/error.h"

namespace ssdq::testing_support {

inline std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace ssdq::testing_support
