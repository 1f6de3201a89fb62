// Megatron-LM checkpoints written by real PyTorch (tests/fixtures/megatron/make_fixtures.py):
// one rank and two tensor-parallel ranks of the same model both read as the canonical tensors,
// and the refusals (hybrid model, a forbidden global beside the args, a missing shard, shards
// that disagree) name the problem.
#include "formats/megatron_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "formats/error.h"
#include "formats/safetensors.h"

namespace ssdq {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kDir = "tests/fixtures/megatron/";

std::string error_of(const std::string& dir) {
  try {
    load_checkpoint(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void expect_expected_tensors(const Checkpoint& checkpoint) {
  const SafetensorsFile expected = read_safetensors(kDir + "expected.safetensors");
  ASSERT_EQ(checkpoint.tensors.size(), expected.tensors.size());
  for (const auto& [name, want] : expected.tensors) {
    ASSERT_TRUE(checkpoint.tensors.count(name)) << name;
    const Tensor& got = checkpoint.tensors.at(name);
    EXPECT_EQ(got.dtype, want.dtype) << name;
    ASSERT_EQ(got.shape, want.shape) << name;
    EXPECT_EQ(0, std::memcmp(got.data, want.data, want.nbytes())) << name;
  }
}

TEST(MegatronCheckpoint, OneRankReadsAsTheCanonicalModel) {
  ASSERT_TRUE(is_megatron_checkpoint(kDir + "tp1"));
  const Checkpoint c = load_checkpoint(kDir + "tp1");
  EXPECT_EQ(c.layout, "Megatron-LM (release, 1 tensor-parallel shard)");
  EXPECT_EQ(c.config.d_model, 32);
  EXPECT_EQ(c.config.n_layer, 2);
  EXPECT_EQ(c.config.d_state, 16);
  EXPECT_EQ(c.config.headdim, 16);
  EXPECT_EQ(c.config.ngroups, 2);
  EXPECT_EQ(c.config.expand, 2);
  EXPECT_EQ(c.config.d_conv, 4);
  EXPECT_EQ(c.config.vocab_size, 400);
  EXPECT_FALSE(c.config.tie_embeddings);
  expect_expected_tensors(c);
}

TEST(MegatronCheckpoint, TwoTensorParallelRanksMergeToTheSameTensors) {
  const Checkpoint c = load_checkpoint(kDir + "tp2");
  EXPECT_EQ(c.layout, "Megatron-LM (iter_0001000, 2 tensor-parallel shards)");
  expect_expected_tensors(c);
}

TEST(MegatronCheckpoint, RefusesHybridModels) {
  EXPECT_THAT(error_of(kDir + "hybrid"),
              HasSubstr("args.hybrid_override_pattern 'M*' has a non-Mamba layer ('*' at layer 1); hybrid checkpoints"));
}

TEST(MegatronCheckpoint, RefusesAForbiddenGlobalBesideTheArgs) {
  EXPECT_THAT(error_of(kDir + "forbidden_global"), HasSubstr("forbidden pickle global 'collections.Counter'"));
}

TEST(MegatronCheckpoint, RefusesShardsThatDisagree) {
  EXPECT_THAT(error_of(kDir + "bad_shard_shapes"),
              HasSubstr("tensor 'decoder.layers.0.mixer.out_proj.weight' is BF16 [32, 32] in mp_rank_00 but BF16 [32, "
                        "30] in mp_rank_01; the shards disagree"));
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

class TempCopy {
 public:
  explicit TempCopy(const std::string& from) {
    std::string pattern = (fs::temp_directory_path() / "ssdq-megatron-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
    fs::copy(from, path_, fs::copy_options::recursive);
  }
  ~TempCopy() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(MegatronCheckpoint, NamesAMissingShard) {
  TempCopy copy(kDir + "tp2");
  fs::remove_all(copy.path() + "/iter_0001000/mp_rank_01");
  EXPECT_THAT(error_of(copy.path()),
              HasSubstr("args.tensor_model_parallel_size is 2 but " + copy.path() +
                        "/iter_0001000 holds 1 shard(s); a shard is missing"));
  TempCopy gap(kDir + "tp2");
  fs::rename(gap.path() + "/iter_0001000/mp_rank_01", gap.path() + "/iter_0001000/mp_rank_02");
  EXPECT_THAT(error_of(gap.path()), HasSubstr("shard mp_rank_01 is missing"));
}

TEST(MegatronCheckpoint, NamesBadFolders) {
  TempCopy copy(kDir + "tp1");
  write_text(copy.path() + "/latest_checkpointed_iteration.txt", "final\n");
  EXPECT_THAT(error_of(copy.path()), HasSubstr("expected 'release' or an iteration number, found 'final'"));
  write_text(copy.path() + "/latest_checkpointed_iteration.txt", "42");
  EXPECT_THAT(error_of(copy.path()), HasSubstr("names iteration '42', but"));
  write_text(copy.path() + "/latest_checkpointed_iteration.txt", "release");
  fs::rename(copy.path() + "/release/mp_rank_00", copy.path() + "/release/mp_rank_00_000");
  EXPECT_THAT(error_of(copy.path()), HasSubstr("mp_rank_00_000 is a pipeline-parallel shard"));
  fs::remove_all(copy.path() + "/release/mp_rank_00_000");
  write_text(copy.path() + "/release/metadata.json", "{}");
  EXPECT_THAT(error_of(copy.path()), HasSubstr("distributed (torch_dist) checkpoint format"));
}

}  // namespace
}  // namespace ssdq
