#include "checkpoint/checkpoint_writer.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "checkpoint/quant.h"
#include "checkpoint/safetensors_writer.h"
#include "core/bf16.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace tern {

namespace fs = std::filesystem;
using json = nlohmann::json;

Layout layout_from_name(const std::string& s) {
  if (s == "hf") return Layout::hf;
  if (s == "mlx4") return Layout::mlx4;
  fail("unknown --layout '{}' (hf or mlx4)", s);
}

std::vector<LogicalTensor> logical_tensors(const ModelConfig& c) {
  std::vector<LogicalTensor> v;
  auto add = [&](std::string name, Role role, int64_t rows, int64_t cols, bool residual = false,
                 int64_t stack = 0) {
    v.push_back({std::move(name), role, stack, rows, cols, residual});
  };
  const int64_t D = c.hidden;
  add("embed_tokens.weight", Role::embedding, c.vocab, D);
  add("norm.weight", Role::norm_1p, 1, D);
  if (!c.tie_embeddings) add("lm_head.weight", Role::matrix, c.vocab, D);
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", Role::norm_1p, 1, D);
    add(p + "post_attention_layernorm.weight", Role::norm_1p, 1, D);
    if (c.layer_types[size_t(i)] == LayerType::linear_attention) {
      const std::string a = p + "linear_attn.";
      add(a + "in_proj_qkv.weight", Role::matrix, c.conv_channels(), D);
      add(a + "in_proj_z.weight", Role::matrix, c.lin_value_dim(), D);
      add(a + "in_proj_b.weight", Role::matrix, c.lin_v_heads, D);
      add(a + "in_proj_a.weight", Role::matrix, c.lin_v_heads, D);
      add(a + "conv1d.weight", Role::conv, c.conv_channels(), c.conv_kernel);
      add(a + "dt_bias", Role::dt_bias, 1, c.lin_v_heads);
      add(a + "A_log", Role::a_log, 1, c.lin_v_heads);
      add(a + "norm.weight", Role::gated_norm, 1, c.lin_v_dim);
      add(a + "out_proj.weight", Role::matrix, D, c.lin_value_dim(), true);
    } else {
      const std::string a = p + "self_attn.";
      const int64_t hd = c.head_dim;
      add(a + "q_proj.weight", Role::matrix, 2 * c.n_heads * hd, D);
      add(a + "k_proj.weight", Role::matrix, c.n_kv_heads * hd, D);
      add(a + "v_proj.weight", Role::matrix, c.n_kv_heads * hd, D);
      add(a + "o_proj.weight", Role::matrix, D, c.n_heads * hd, true);
      add(a + "q_norm.weight", Role::norm_1p, 1, hd);
      add(a + "k_norm.weight", Role::norm_1p, 1, hd);
    }
    const std::string m = p + "mlp.";
    add(m + "gate.weight", Role::router, c.n_experts, D);
    add(m + "shared_expert_gate.weight", Role::router, 1, D);
    add(m + "shared_expert.gate_proj.weight", Role::matrix, c.shared_inter, D);
    add(m + "shared_expert.up_proj.weight", Role::matrix, c.shared_inter, D);
    add(m + "shared_expert.down_proj.weight", Role::matrix, D, c.shared_inter, true);
    add(m + "experts.gate_up_proj", Role::experts, 2 * c.moe_inter, D, false, c.n_experts);
    add(m + "experts.down_proj", Role::experts, D, c.moe_inter, true, c.n_experts);
  }
  return v;
}

namespace {

bool is_vector(Role r) {
  return r == Role::norm_1p || r == Role::gated_norm || r == Role::a_log || r == Role::dt_bias;
}

// Rows of a logical tensor as stored: norm multipliers go back to w for HF
// files, and a part of each expert's rows (MLX's gate or up stack) can be
// read as a stack of its own.
class RowReader {
 public:
  RowReader(const WeightSource& src, const LogicalTensor& t, bool unshift_norm,
            int64_t part_rows = 0, int64_t part_offset = 0)
      : src_(src),
        t_(t),
        unshift_(unshift_norm && t.role == Role::norm_1p),
        part_rows_(part_rows),
        part_offset_(part_offset) {}

  void read(int64_t r0, int64_t n, float* out) const {
    if (part_rows_ == 0) {
      src_.rows(t_, r0, n, out);
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t r = r0 + i, expert = r / part_rows_;
        src_.rows(t_, expert * t_.rows + part_offset_ + r % part_rows_, 1, out + i * t_.cols);
      }
    }
    if (unshift_)
      for (int64_t i = 0; i < n * t_.cols; ++i) out[i] -= 1.0f;
  }

 private:
  const WeightSource& src_;
  const LogicalTensor& t_;
  bool unshift_;
  int64_t part_rows_, part_offset_;
};

// Fills a dense tensor of `total_rows` logical rows.
void fill_dense(const RowReader& rd, int64_t total_rows, int64_t cols, DType dt, uint8_t* dst) {
  ThreadPool::global().parallel_for(size_t(total_rows), 64, [&](size_t b, size_t e, int) {
    std::vector<float> buf(size_t(cols) * 64);
    for (size_t r = b; r < e; r += 64) {
      const int64_t n = std::min<int64_t>(64, int64_t(e - r));
      rd.read(int64_t(r), n, buf.data());
      for (int64_t i = 0; i < n * cols; ++i) {
        const size_t k = r * size_t(cols) + size_t(i);
        if (dt == DType::f32)
          reinterpret_cast<float*>(dst)[k] = buf[size_t(i)];
        else
          reinterpret_cast<uint16_t*>(dst)[k] = f32_to_bf16(buf[size_t(i)]);
      }
    }
  });
}

struct Planner {
  std::vector<PlannedTensor> quantised, f32, bf16;  // written in this order (alignment)

  void dense(const std::string& name, std::vector<int64_t> shape, DType dt,
             std::shared_ptr<RowReader> rd, int64_t rows, int64_t cols) {
    PlannedTensor p{name, dt, std::move(shape),
                    [=](uint8_t* dst) { fill_dense(*rd, rows, cols, dt, dst); }};
    (dt == DType::f32 ? f32 : bf16).push_back(std::move(p));
  }

  // base.weight (U32), base.scales, base.biases: the weight's fill quantises
  // and keeps scales and biases for the two fills that follow it.
  void quant(const std::string& base, std::vector<int64_t> lead, std::shared_ptr<RowReader> rd,
             int64_t rows, int64_t cols, int bits) {
    auto qb = std::make_shared<QuantBuffer>();
    auto dims = [&](int64_t last) {
      std::vector<int64_t> s = lead;
      s.push_back(last);
      return s;
    };
    const int64_t words = cols * bits / 32, groups = cols / 64;
    quantised.push_back(
        {base + ".weight", DType::u32, dims(words), [=](uint8_t* dst) {
           qb->scales.resize(size_t(rows * groups));
           qb->biases.resize(size_t(rows * groups));
           auto* packed = reinterpret_cast<uint32_t*>(dst);
           ThreadPool::global().parallel_for(size_t(rows), 16, [&](size_t b, size_t e, int) {
             std::vector<float> row(static_cast<size_t>(cols));
             for (size_t r = b; r < e; ++r) {
               rd->read(int64_t(r), 1, row.data());
               quantize_row(row.data(), cols, bits, 64, packed + r * size_t(words),
                            &qb->scales[r * size_t(groups)], &qb->biases[r * size_t(groups)]);
             }
           });
         }});
    auto copy_out = [qb](std::vector<uint16_t> QuantBuffer::*field) {
      return [qb, field](uint8_t* dst) {
        std::vector<uint16_t>& v = (*qb).*field;
        std::memcpy(dst, v.data(), v.size() * 2);
        v = {};
      };
    };
    quantised.push_back(
        {base + ".scales", DType::bf16, dims(groups), copy_out(&QuantBuffer::scales)});
    quantised.push_back(
        {base + ".biases", DType::bf16, dims(groups), copy_out(&QuantBuffer::biases)});
  }
};

std::string strip_weight(const std::string& n) {
  return n.ends_with(".weight") ? n.substr(0, n.size() - 7) : n;
}

}  // namespace

void write_checkpoint(const json& config_json, const WeightSource& src, Layout layout,
                      const std::string& dir) {
  ModelConfig cfg = parse_config(config_json, "config");
  json out_cfg = config_json;
  out_cfg.erase("quantization");
  out_cfg.erase("quantization_config");
  Planner pl;
  const std::string prefix =
      layout == Layout::hf ? "model.language_model." : "language_model.model.";
  json quant = {{"group_size", 64}, {"bits", 4}, {"mode", "affine"}};

  const std::vector<LogicalTensor> tensors = logical_tensors(cfg);  // fills refer to these
  for (const LogicalTensor& t : tensors) {
    auto rd = std::make_shared<RowReader>(src, t, layout == Layout::hf);
    std::string name =
        t.name == "lm_head.weight"
            ? (layout == Layout::hf ? "lm_head.weight" : "language_model.lm_head.weight")
            : prefix + t.name;
    const DType dt = t.role == Role::a_log ? DType::f32 : DType::bf16;
    if (is_vector(t.role)) {
      pl.dense(name, {t.cols}, dt, rd, 1, t.cols);
    } else if (t.role == Role::conv) {
      std::vector<int64_t> shape = layout == Layout::hf ? std::vector<int64_t>{t.rows, 1, t.cols}
                                                        : std::vector<int64_t>{t.rows, t.cols, 1};
      pl.dense(name, shape, dt, rd, t.rows, t.cols);
    } else if (layout == Layout::hf) {
      std::vector<int64_t> shape = t.stack ? std::vector<int64_t>{t.stack, t.rows, t.cols}
                                           : std::vector<int64_t>{t.rows, t.cols};
      pl.dense(name, shape, dt, rd, (t.stack ? t.stack : 1) * t.rows, t.cols);
    } else if (t.role == Role::experts) {
      // MLX splits the fused gate_up stack into a gate stack and an up stack.
      const std::string base = prefix + t.name.substr(0, t.name.find("experts.")) + "switch_mlp.";
      const bool gate_up = t.name.ends_with("gate_up_proj");
      const int64_t part_rows = gate_up ? t.rows / 2 : t.rows;
      for (int part = 0; part < (gate_up ? 2 : 1); ++part) {
        auto prd = std::make_shared<RowReader>(src, t, false, part_rows, part * part_rows);
        std::string proj = gate_up ? (part == 0 ? "gate_proj" : "up_proj") : "down_proj";
        pl.quant(base + proj, {t.stack, part_rows}, prd, t.stack * part_rows, t.cols, 4);
      }
    } else if (t.cols % 64 == 0) {
      const int bits = t.role == Role::router ? 8 : 4;
      const std::string base = strip_weight(name);
      if (bits != 4) quant[base] = {{"group_size", 64}, {"bits", bits}};
      pl.quant(base, {t.rows}, rd, t.rows, t.cols, bits);
    } else {
      pl.dense(name, {t.rows, t.cols}, dt, rd, t.rows, t.cols);
    }
  }
  if (layout == Layout::mlx4) {
    out_cfg["quantization"] = quant;
    out_cfg["quantization_config"] = quant;
  }
  fs::create_directories(dir);
  std::ofstream(fs::path(dir) / "config.json") << out_cfg.dump(2) << "\n";
  std::vector<PlannedTensor> all = std::move(pl.quantised);
  for (auto* v : {&pl.f32, &pl.bf16})
    for (auto& p : *v) all.push_back(std::move(p));
  write_safetensors(dir, std::move(all), size_t(5) << 30);
}

}  // namespace tern
