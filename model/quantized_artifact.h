// A QuantizedModel to and from the tensors and metadata of an .ssdq artifact (formats/artifact.h;
// the schema is docs/ARTIFACT.md). Reading checks every tensor against the stored config and
// the model with validate_quantized_model, so a loaded model is safe to run.
#pragma once

#include <memory>
#include <string>

#include "model/quantized_model.h"
#include "quant/parallel_items.h"

namespace ssdq {

// JSON strings stored next to the model.
struct ArtifactDescription {
  std::string recipe;       // the recipe and every flag (quant/recipe.h)
  std::string calibration;  // statistics file, its hash and its provenance; "{}" for none
  std::string tokenizer;    // {"sha256": ..., "json": <tokenizer.json text>} or {"sha256", "sentencepiece_base64"}
};

// Atomic: on any failure nothing is left at `path`. `parallel` runs the tensors' conversions
// (fp16 rounding, int4 packing) a layer or block an item; the file is the same either way.
void write_quantized_artifact(const std::string& path, const QuantizedModel& model, const ArtifactDescription& description,
                              const ParallelFor& parallel = {});

struct LoadedArtifact {
  std::shared_ptr<const QuantizedModel> model;
  ArtifactDescription description;
  std::string tokenizer_bytes;  // the embedded tokenizer.json text or SentencePiece model ("" when none)
};
LoadedArtifact read_quantized_artifact(const std::string& path);

// {"sha256": hash, "json": text} as stored in the "tokenizer" metadata; a SentencePiece model
// (binary) as {"sha256": hash, "sentencepiece_base64": ...}.
std::string tokenizer_metadata(const std::string& tokenizer_bytes, const std::string& sha256);

}  // namespace ssdq
