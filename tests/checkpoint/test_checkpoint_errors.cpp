// Broken checkpoints: every failure mode of the safetensors reader and the
// layout loader is a tern::Error that names the file and the tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "checkpoint/safetensors_writer.h"
#include "checkpoint/weights.h"
#include "core/error.h"
#include "test_util.h"

namespace tern {

namespace fs = std::filesystem;

namespace {

void write_raw(const std::string& path, const std::string& header, size_t data_bytes) {
  std::ofstream f(path, std::ios::binary);
  uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header;
  f << std::string(data_bytes, '\0');
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_ERROR_HAS(expr, text) \
  EXPECT_NE(error_of([&] { expr; }).find(text), std::string::npos) << error_of([&] { expr; })

// Copies a checkpoint, letting `edit` replace each tensor by zero or more.
using Edit = std::function<std::vector<PlannedTensor>(const TensorView&)>;

std::string rewrite(const std::string& src, const std::string& name, const Edit& edit) {
  const std::string dst = test::scratch_dir(name);
  fs::copy_file(fs::path(src) / "config.json", fs::path(dst) / "config.json");
  TensorStore st(src);
  std::vector<PlannedTensor> out;
  for (const std::string& n : st.names())
    for (PlannedTensor& p : edit(st.get(n))) out.push_back(std::move(p));
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return dtype_size(a.dtype) > dtype_size(b.dtype);
  });
  write_safetensors(dst, std::move(out), size_t(1) << 40);
  return dst;
}

PlannedTensor copy_of(const TensorView& v, std::string new_name = "") {
  return {new_name.empty() ? v.name : new_name, v.dtype, v.shape,
          [&v](uint8_t* d) { std::memcpy(d, v.data, v.nbytes); }};
}

// The tensor's bytes under another dtype and shape (cut or zero-padded).
PlannedTensor recast(const TensorView& v, DType dtype, std::vector<int64_t> shape) {
  PlannedTensor p{v.name, dtype, std::move(shape), nullptr};
  const size_t n = p.nbytes();
  p.fill = [&v, n](uint8_t* d) {
    std::memset(d, 0, n);
    std::memcpy(d, v.data, std::min(n, v.nbytes));
  };
  return p;
}

const char* kQProj = "model.language_model.layers.3.self_attn.q_proj.weight";

}  // namespace

TEST(Safetensors, BadFiles) {
  const std::string d = test::scratch_dir("bad_st");
  const std::string f = d + "/model.safetensors";
  std::ofstream(f) << "abc";
  EXPECT_ERROR_HAS(SafetensorsFile s(f), "truncated safetensors file (3 bytes");
  write_raw(f, "{}", 0);
  std::filesystem::resize_file(f, 6);
  EXPECT_ERROR_HAS(SafetensorsFile s(f), "truncated");
  std::ofstream(f, std::ios::binary) << std::string("\xff\x00\x00\x00\x00\x00\x00\x00", 8) << "{}";
  EXPECT_ERROR_HAS(SafetensorsFile s(f), "header of 255 bytes");
  write_raw(f, "{not json", 0);
  EXPECT_ERROR_HAS(SafetensorsFile s(f), "bad safetensors header JSON");
  write_raw(f, R"({"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}})", 4);
  EXPECT_ERROR_HAS(SafetensorsFile s(f), "tensor w: data_offsets [0, 8] lie outside");
  write_raw(f, R"({"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 8]}})", 8);
  EXPECT_ERROR_HAS(SafetensorsFile s(f), "needs 12 bytes but data_offsets span 8");
  write_raw(f, R"({"w": {"dtype": "Q9", "shape": [2], "data_offsets": [0, 2]}})", 2);
  EXPECT_ERROR_HAS(SafetensorsFile s(f), "unknown dtype 'Q9'");
  write_raw(f, R"({"w": {"dtype": "BF16", "shape": [2]}})", 4);
  EXPECT_ERROR_HAS(SafetensorsFile s(f), "tensor w: header entry needs");
  write_raw(f, R"({"w": {"dtype": "BF16", "shape": [-2], "data_offsets": [0, 4]}})", 4);
  EXPECT_ERROR_HAS(SafetensorsFile s(f), "bad shape");
  write_raw(f, R"({"a": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]},
                  "w": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}})",
            6);
  EXPECT_ERROR_HAS(SafetensorsFile s(f), "not aligned");
  write_raw(f, R"({"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}})", 4);
  EXPECT_EQ(SafetensorsFile(f).tensors().at("w").numel(), 2);
}

// Bytes read into memory and then released (matrices repacked elsewhere): the
// whole 4 KB pages inside the union of the released ranges read as zeros; a
// byte of a range still in use never changes.
TEST(Safetensors, ReleaseGivesBackOnlyWholePagesOfReleasedBytes) {
  const std::string d = test::scratch_dir("release_st");
  std::vector<PlannedTensor> ts;
  for (const char* name : {"a", "b", "c"})
    ts.push_back({name, DType::f32, {3000}, [](uint8_t* dst) { std::memset(dst, 0x5a, 12000); }});
  write_safetensors(d, std::move(ts), size_t(1) << 40);
  TensorStore st(d, Residency::huge_pages);
  if (st.residency() != Residency::huge_pages) GTEST_SKIP() << "no transparent huge pages";
  const TensorView &a = st.get("a"), &b = st.get("b"), &c = st.get("c");
  ASSERT_EQ(a.data + 12000, b.data);
  ASSERT_EQ(b.data + 12000, c.data);
  auto count = [](const TensorView& t, uint8_t v) {
    return std::count(t.data, t.data + t.nbytes, v);
  };
  st.release(b.data, b.nbytes);
  EXPECT_EQ(count(a, 0x5a), 12000);
  EXPECT_EQ(count(c, 0x5a), 12000);
  const auto zeros_b = count(b, 0);
  EXPECT_GE(zeros_b, 4096);  // at least the one whole page inside b
  EXPECT_EQ(zeros_b % 4096, 0);
  st.release(a.data, a.nbytes);  // now a and b are one range: the page they share goes too
  EXPECT_GT(count(a, 0) + count(b, 0), zeros_b + 4096);
  EXPECT_EQ(count(c, 0x5a), 12000);
}

TEST(Safetensors, BadIndex) {
  const std::string d = test::scratch_dir("bad_index");
  EXPECT_ERROR_HAS(TensorStore s(d), "no model.safetensors");
  EXPECT_ERROR_HAS(TensorStore s(d + "/nope"), "does not exist");
  std::ofstream(d + "/model.safetensors.index.json") << R"({"weight_map": {"w": "a.safetensors"}})";
  EXPECT_ERROR_HAS(TensorStore s(d), "shard a.safetensors listed in the index is missing");
  write_raw(d + "/a.safetensors",
            R"({"v": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}})", 4);
  EXPECT_ERROR_HAS(TensorStore s(d), "puts tensor w in a.safetensors");
  std::ofstream(d + "/model.safetensors.index.json")
      << R"({"weight_map": {"v": "a.safetensors", "x": "b.safetensors"}})";
  write_raw(d + "/b.safetensors",
            R"({"v": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}})", 4);
  EXPECT_ERROR_HAS(TensorStore s(d), "tensor v appears in more than one shard");
  std::ofstream(d + "/model.safetensors.index.json") << R"({"weights": {}})";
  EXPECT_ERROR_HAS(TensorStore s(d), "missing 'weight_map'");
  std::ofstream(d + "/model.safetensors.index.json") << "{";
  EXPECT_ERROR_HAS(TensorStore s(d), "invalid JSON");
}

TEST(Loader, MissingWrongAndUnknownTensors) {
  const std::string src = test::tiny_checkpoint(Layout::hf);
  std::string d = rewrite(src, "missing", [](const TensorView& v) {
    return v.name == kQProj ? std::vector<PlannedTensor>{} : std::vector{copy_of(v)};
  });
  EXPECT_ERROR_HAS(load_model(d, WeightMode::bf16),
                   std::string("missing tensor ") + kQProj + " (expected shape [2048, 128])");

  d = rewrite(src, "wrong_shape", [](const TensorView& v) {
    if (v.name != kQProj) return std::vector{copy_of(v)};
    return std::vector{recast(v, v.dtype, {1024, 256})};
  });
  EXPECT_ERROR_HAS(load_model(d, WeightMode::bf16), "has shape [1024, 256], expected [2048, 128]");

  d = rewrite(src, "wrong_dtype", [](const TensorView& v) {
    if (v.name != kQProj) return std::vector{copy_of(v)};
    return std::vector{recast(v, DType::u32, v.shape)};
  });
  EXPECT_ERROR_HAS(load_model(d, WeightMode::bf16), "has dtype U32, expected BF16, F16 or F32");

  d = rewrite(src, "unknown", [](const TensorView& v) {
    std::vector out{copy_of(v)};
    if (v.name == kQProj) out.push_back(copy_of(v, "model.language_model.layers.3.extra.weight"));
    return out;
  });
  EXPECT_ERROR_HAS(load_model(d, WeightMode::bf16),
                   "unknown tensor model.language_model.layers.3.extra.weight");

  d = rewrite(src, "unknown_layout", [](const TensorView& v) {
    std::string n = v.name;
    if (n.starts_with("model.language_model.")) n = "transformer." + n.substr(21);
    return std::vector{copy_of(v, n)};
  });
  EXPECT_ERROR_HAS(load_model(d, WeightMode::bf16), "unknown layout");
}

TEST(Loader, TruncatedAndCorruptFiles) {
  const std::string src = test::tiny_checkpoint(Layout::mlx4);
  const std::string d = test::scratch_dir("truncated");
  fs::copy(src, d, fs::copy_options::overwrite_existing | fs::copy_options::recursive);
  const std::string f = d + "/model.safetensors";
  fs::resize_file(f, fs::file_size(f) - 1000);
  const std::string err = error_of([&] { load_model(d, WeightMode::q4); });
  EXPECT_NE(err.find(f), std::string::npos) << err;
  EXPECT_NE(err.find("outside"), std::string::npos) << err;

  std::ofstream(d + "/config.json") << "{\"text_config\": ";
  EXPECT_ERROR_HAS(load_model(d, WeightMode::q4), "invalid JSON");
}

TEST(Loader, QuantisedTensorsMustAgreeWithTheConfig) {
  const std::string src = test::tiny_checkpoint(Layout::mlx4);
  // The config loses its 8-bit override for layer 0's router.
  std::string d =
      rewrite(src, "no_override", [](const TensorView& v) { return std::vector{copy_of(v)}; });
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(d + "/config.json"));
  for (const char* k : {"quantization", "quantization_config"})
    cfg[k].erase("language_model.model.layers.0.mlp.gate");
  std::ofstream(d + "/config.json") << cfg.dump();
  EXPECT_ERROR_HAS(
      load_model(d, WeightMode::q4),
      "layers.0.mlp.gate is stored as 8-bit group 64, but config.json says 4-bit group 64");
  // A quantised matrix without its biases.
  d = rewrite(src, "no_biases", [](const TensorView& v) {
    return v.name == "language_model.model.layers.3.self_attn.k_proj.biases"
               ? std::vector<PlannedTensor>{}
               : std::vector{copy_of(v)};
  });
  EXPECT_ERROR_HAS(load_model(d, WeightMode::q4),
                   "missing tensor language_model.model.layers.3.self_attn.k_proj.biases (expected "
                   "shape [512, 2])");
  // Codes that are neither 4- nor 8-bit.
  d = rewrite(src, "odd_bits", [](const TensorView& v) {
    if (v.name != "language_model.model.layers.3.self_attn.k_proj.weight")
      return std::vector{copy_of(v)};
    return std::vector{recast(v, DType::u32, {512, 8})};
  });
  EXPECT_ERROR_HAS(load_model(d, WeightMode::q4), "not 4- or 8-bit");
}

// Random damage to a real checkpoint's header and length: every outcome is a
// clean load or a tern::Error, never a crash.
TEST(Loader, RandomCorruptionNeverCrashes) {
  const std::string src = test::tiny_checkpoint(Layout::mlx4);
  const std::string d = test::scratch_dir("corrupt");
  fs::copy(src, d, fs::copy_options::overwrite_existing | fs::copy_options::recursive);
  const std::string f = d + "/model.safetensors";
  std::string original;
  {
    std::ifstream in(src + "/model.safetensors", std::ios::binary);
    original.assign(std::istreambuf_iterator<char>(in), {});
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, original.data(), 8);
  CounterRng rng(17);
  int errors = 0;
  for (int i = 0; i < 120; ++i) {
    std::string damaged = original;
    if (i % 4 == 3) {
      damaged.resize(size_t(rng.next_u64() % original.size()));
    } else {
      for (int k = 0; k < 1 + i % 3; ++k) {
        const size_t at = size_t(rng.next_u64() % (8 + header_len));
        damaged[at] = char(rng.next_u64() & 0xff);
      }
    }
    std::ofstream(f, std::ios::binary) << damaged;
    try {
      load_model(d, WeightMode::q4);
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 60);
}

TEST(Loader, QuantisedCheckpointNeedsQ4) {
  EXPECT_ERROR_HAS(load_model(test::tiny_checkpoint(Layout::mlx4), WeightMode::bf16),
                   "--weights bf16 needs a bf16 checkpoint");
}

TEST(Loader, SkipsVisionAndMtp) {
  const std::string src = test::tiny_checkpoint(Layout::hf);
  std::string d = rewrite(src, "with_mtp", [](const TensorView& v) {
    std::vector out{copy_of(v)};
    if (v.name == kQProj) {
      out.push_back(copy_of(v, "mtp.fc.weight"));
      out.push_back(copy_of(v, "model.visual.blocks.0.attn.qkv.weight"));
    }
    return out;
  });
  auto w = load_model(d, WeightMode::bf16);
  EXPECT_EQ(w->skipped.size(), 2u);
}

}  // namespace tern
