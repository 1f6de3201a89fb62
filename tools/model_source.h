// What a command runs: a checkpoint folder (--model) or an artifact (--artifact) on a device,
// with its tokenizer (--tokenizer, else the folder's tokenizer.json or the one the artifact
// embeds). Shared by eval-ppl and generate.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "formats/tokenizer.h"
#include "runtime/backend.h"
#include "runtime/backend_factory.h"

namespace ssdq::cli {

struct ModelSource {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string description;  // what was loaded, in lines for the report
};

// The flags naming what to run: --model, --artifact (excluding each other), --tokenizer, --device,
// --tp.
struct ModelSourceFlags {
  std::string model, artifact, tokenizer, device = "cpu";
  int tp = 1;  // tensor-parallel ranks (--tp; the reference of eval-ppl runs on one)
  std::string model_flag = "--model";  // how errors name the folder's flag
  BackendPreferences preferences;       // what the command asks of its engines (each rank's under --tp)
};
void add_model_source_options(CLI::App* command, ModelSourceFlags& flags);

// The folder calibrate and export load: --model (a folder or a hub name, resolved) or
// --synthetic NAME (model/model_loader.h's synthetic_model_dir), exactly one of them.
std::string model_or_synthetic(const std::string& command, const std::string& model, const std::string& synthetic);

// `command` names the caller in the error when not exactly one of model and artifact is given.
ModelSource load_model_source(const std::string& command, const ModelSourceFlags& flags);

}  // namespace ssdq::cli
