#include "checkpoint/safetensors_writer.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tern {

namespace fs = std::filesystem;
using json = nlohmann::json;

size_t PlannedTensor::nbytes() const {
  size_t n = dtype_size(dtype);
  for (int64_t d : shape) n *= size_t(d);
  return n;
}

static void write_shard(const fs::path& path, const std::vector<const PlannedTensor*>& ts,
                        Progress& progress) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  size_t offset = 0;
  for (const PlannedTensor* t : ts) {
    // The caller orders tensors so that each starts aligned to its element size.
    TERN_CHECK(offset % dtype_size(t->dtype) == 0);
    header[t->name] = {{"dtype", dtype_name(t->dtype)},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + t->nbytes()}}};
    offset += t->nbytes();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // keeps every tensor aligned to 8 bytes
  std::ofstream out(path, std::ios::binary);
  if (!out) fail("cannot write {}", path.string());
  uint64_t len = h.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(h.data(), std::streamsize(h.size()));
  for (const PlannedTensor* t : ts) {
    std::unique_ptr<uint8_t[]> buf(new uint8_t[t->nbytes()]);
    t->fill(buf.get());
    out.write(reinterpret_cast<const char*>(buf.get()), std::streamsize(t->nbytes()));
    if (!out) fail("write to {} failed (disk full?)", path.string());
    progress.add(t->nbytes());
  }
}

void write_safetensors(const std::string& dir, std::vector<PlannedTensor> tensors,
                       size_t max_shard_bytes) {
  fs::create_directories(dir);
  std::vector<std::vector<const PlannedTensor*>> shards(1);
  size_t bytes = 0, total = 0;
  for (const PlannedTensor& t : tensors) {
    if (bytes > 0 && bytes + t.nbytes() > max_shard_bytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().push_back(&t);
    bytes += t.nbytes();
    total += t.nbytes();
  }
  Progress progress("writing " + dir, total);
  if (shards.size() == 1) {
    write_shard(fs::path(dir) / "model.safetensors", shards[0], progress);
    return;
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", json::object()}};
  for (size_t i = 0; i < shards.size(); ++i) {
    std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    write_shard(fs::path(dir) / name, shards[i], progress);
    for (const PlannedTensor* t : shards[i]) index["weight_map"][t->name] = name;
  }
  std::ofstream(fs::path(dir) / "model.safetensors.index.json") << index.dump(2) << "\n";
}

}  // namespace tern
