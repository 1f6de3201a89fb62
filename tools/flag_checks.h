// Checks for numeric flags whose errors say the valid range in words ("must be 1 or more"),
// instead of CLI11's numeric bounds of the type.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <string>

#include "formats/error.h"

namespace ssdq::cli {

// A whole number in [low, high]; `high` left at its default means no upper bound.
inline CLI::Validator whole_number(int64_t low, int64_t high = std::numeric_limits<int64_t>::max()) {
  const bool bounded = high != std::numeric_limits<int64_t>::max();
  const std::string range = bounded ? fmt::format("{} to {}", low, high) : fmt::format("{} or more", low);
  return CLI::Validator(
      [low, high, range](std::string& text) -> std::string {
        int64_t value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return fmt::format("expected a whole number ({}), got '{}'", range, text);
        if (value < low || value > high) return fmt::format("must be {}, got {}", range, text);
        return "";
      },
      bounded ? fmt::format("INT in {}..{}", low, high) : fmt::format("INT >= {}", low));
}

// A whole number written in a flag's value (e.g. the K of "auto:K"); fails naming the flag.
inline int64_t parse_whole_number(const std::string& flag, const std::string& text) {
  int64_t value = 0;
  if (text.empty() || !CLI::detail::lexical_cast(text, value))
    fail("{}: expected a whole number, got '{}'", flag, text);
  return value;
}

}  // namespace ssdq::cli
