// Random-weight checkpoints of the real structure (tern make-dummy), and the
// random weight source they are made from. Deterministic for a seed: every
// value depends only on (seed, tensor name, index), whatever the layout.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "checkpoint/checkpoint_writer.h"

namespace tern {

class RandomSource : public WeightSource {
 public:
  explicit RandomSource(uint64_t seed) : seed_(seed) {}
  void rows(const LogicalTensor& t, int64_t r0, int64_t n, float* out) const override;

 private:
  uint64_t seed_;
};

struct DummyOptions {
  std::string preset = "tiny";
  std::string config_file;  // overrides the preset when set
  Layout layout = Layout::mlx4;
  uint64_t seed = 0;
  std::string out_dir;
  std::string tokenizer_dir;  // optional: copied in, vocabulary grown to cover it
};

void make_dummy(const DummyOptions& opt);

// Number of ids a tokenizer.json defines (regular vocabulary and added tokens).
int tokenizer_id_count(const std::string& tokenizer_json_path);

}  // namespace tern
