// ssdq: post-training quantization of Mamba-2 models, and a runtime that measures the result.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "formats/error.h"
#include "tools/commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "ssdq: quantize Mamba-2 (SSD) language models after training and measure the result.\n"
      "Run `ssdq COMMAND --help` for the flags of a command."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("ssdq ") + ssdq::cli::kSsdqVersion);
  ssdq::cli::add_calibrate_command(app);
  ssdq::cli::add_export_command(app);
  ssdq::cli::add_eval_ppl_command(app);
  ssdq::cli::add_generate_command(app);
  ssdq::cli::add_info_command(app);
  ssdq::cli::add_bench_command(app);
  ssdq::cli::add_doctor_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ssdq: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
