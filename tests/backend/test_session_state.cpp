// The backend checks of tests/backend_checks.h on the CPU backend.
#include <gtest/gtest.h>

#include "backend_checks.h"
#include "backends/reference/reference_backend.h"
#include "test_util.h"

namespace tern::test {
namespace {

// ctest runs each test in its own process, in parallel: one checkpoint (seed) per test.
std::unique_ptr<ReferenceBackend> tiny_cpu(uint64_t seed) {
  return std::make_unique<ReferenceBackend>(
      load_model(tiny_checkpoint(Layout::mlx4, seed), WeightMode::q4));
}

TEST(CpuSession, SaveRestoreForkGiveTheUninterruptedLogits) {
  check_save_restore_fork(*tiny_cpu(31));
}

TEST(CpuSession, DiskCacheBytesRoundTripExactly) {
  check_bytes_round_trip(*tiny_cpu(35));
}

TEST(CpuSession, SplitGenerationEqualsOneCall) {
  auto be = tiny_cpu(32);
  check_split_generation(*be, SamplingParams{});
  check_split_generation(*be, chat_sampling(9));
}

TEST(CpuSession, SequencesSteppedTogetherDecodeAsAlone) {
  check_step_equals_alone(*tiny_cpu(36));
}

TEST(CpuSession, SamplingHistoryIsBounded) {
  check_history_bounds(*tiny_cpu(33));
}

TEST(CpuSession, SequenceBytesGrowWithTheKvCache) {
  auto be = tiny_cpu(34);
  const ModelConfig& c = be->config();
  auto s = be->new_sequence();
  const size_t empty = be->sequence_bytes(*s);
  std::vector<float> l;
  be->forward(*s, ids_from(100, 1, c.vocab), Logits::none, l);
  EXPECT_TRUE(l.empty());
  EXPECT_GE(be->sequence_bytes(*s) - empty,
            size_t(100) * c.n_full_layers() * 2 * c.n_kv_heads * c.head_dim * sizeof(float));
}

}  // namespace
}  // namespace tern::test
