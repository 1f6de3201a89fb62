// The ssdq subcommands. Each registers its flags on the CLI11 app and runs by calling library
// functions; errors propagate as ssdq::Error and become one line on stderr in main.
#pragma once

#include <CLI/CLI.hpp>

namespace ssdq::cli {

inline constexpr const char* kSsdqVersion = "0.1.0";

void add_eval_ppl_command(CLI::App& app);
void add_info_command(CLI::App& app);
void add_doctor_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_calibrate_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_generate_command(CLI::App& app);

}  // namespace ssdq::cli
