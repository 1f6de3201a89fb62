// Helpers shared by the fuzz harnesses. A harness lets only ssdq::Error pass quietly: any other
// exception escaping a reader (std::bad_alloc, nlohmann's, std::out_of_range) aborts the run and
// counts as a finding, like a crash or a sanitizer report.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ssdq::fuzz {

// A folder private to this process (under $TEST_TMPDIR or /tmp), created on first use and
// removed at exit. Harnesses of readers that take a path write their input there.
const std::string& scratch_dir();

// Writes the bytes to scratch_dir()/name and returns the path.
std::string write_scratch_file(const std::string& name, const uint8_t* data, size_t size);

// A zip of stored (uncompressed) entries, as torch.save writes them; CRCs are left 0 (the
// reader does not check them). Names up to 64 KiB, entries up to 4 GiB.
std::vector<uint8_t> make_stored_zip(const std::vector<std::pair<std::string, std::vector<uint8_t>>>& entries);

}  // namespace ssdq::fuzz
