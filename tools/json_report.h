// Writing a command's --json report: the whole file atomically (nothing at the path on failure).
#pragma once

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>

#include "formats/file_io.h"

namespace ssdq::cli {

// Writes `report` to `path` (nothing when path is empty) and says so on stderr (stdout may be the command's text).
inline void write_json_report(const std::string& path, const nlohmann::json& report) {
  if (path.empty()) return;
  const std::string text = report.dump(2) + "\n";
  write_file_atomic(path, [&](int fd) { write_all(fd, text.data(), text.size(), path); });
  fmt::print(stderr, "wrote {}\n", path);
}

}  // namespace ssdq::cli
