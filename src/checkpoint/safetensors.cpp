#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/host_memory.h"
#include "core/json_file.h"

namespace tern {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* dtype_name(DType t) {
  switch (t) {
    case DType::bf16:
      return "BF16";
    case DType::f16:
      return "F16";
    case DType::f32:
      return "F32";
    case DType::u32:
      return "U32";
    case DType::other:
      break;
  }
  return "other";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::bf16:
    case DType::f16:
      return 2;
    case DType::f32:
    case DType::u32:
      return 4;
    case DType::other:
      break;
  }
  return 0;
}

DType dtype_from_name(const std::string& s) {
  if (s == "BF16") return DType::bf16;
  if (s == "F16") return DType::f16;
  if (s == "F32") return DType::f32;
  if (s == "U32") return DType::u32;
  return DType::other;
}

// Sizes of the safetensors dtypes tern does not compute with, so that their
// byte ranges can still be checked (vision tensors, say, may use them).
static size_t other_dtype_size(const std::string& s) {
  if (s == "F64" || s == "I64" || s == "U64") return 8;
  if (s == "I32") return 4;
  if (s == "I16" || s == "U16") return 2;
  if (s == "I8" || s == "U8" || s == "BOOL" || s == "F8_E4M3" || s == "F8_E5M2") return 1;
  return 0;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string TensorView::shape_str() const {
  return shape_to_string(shape);
}

namespace {

constexpr size_t kHugePage = size_t(2) << 20;

// A private anonymous region of `bytes` advised into 2 MB pages, 2 MB-aligned
// (the region is one huge page longer); nullptr if either step fails.
uint8_t* huge_region(size_t bytes, void*& region, size_t& region_size) {
  region_size = (bytes + kHugePage - 1) / kHugePage * kHugePage + kHugePage;
  region = ::mmap(nullptr, region_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (region == MAP_FAILED) {
    region = nullptr;
    return nullptr;
  }
  auto* a = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(region) + kHugePage - 1) /
                                       kHugePage * kHugePage);
  if (::madvise(a, region_size - kHugePage, MADV_HUGEPAGE) != 0) {
    ::munmap(region, region_size);
    region = nullptr;
    return nullptr;
  }
  return a;
}

// Why huge pages cannot hold `bytes` here, or "" if they can.
std::string huge_pages_unusable(size_t bytes) {
  std::string mode;
  if (FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r")) {
    char buf[128] = {};
    if (std::fgets(buf, sizeof buf, f) != nullptr) mode = buf;
    std::fclose(f);
  }
  if (mode.empty() || mode.find("[never]") != std::string::npos)
    return "transparent huge pages are off";
  const size_t avail = host_memory_available();
  if (avail == 0) return "/proc/meminfo gives no MemAvailable";
  if (bytes > avail / 10 * 9)
    return fmt::format("the checkpoint's {:.1f} GB would not fit in the {:.1f} GB available",
                       double(bytes) / 1e9, double(avail) / 1e9);
  return "";
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path, Residency r, Progress* read)
    : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("cannot open checkpoint file {}", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail("cannot stat {}", path);
  }
  size_ = size_t(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    fail("{}: truncated safetensors file ({} bytes, no header)", path, size_);
  }
  uint8_t* copy = r == Residency::huge_pages ? huge_region(size_, region_, region_size_) : nullptr;
  if (copy != nullptr) {
    mapped_ = false;
    data_ = copy;
    for (size_t off = 0; off < size_;) {
      const ssize_t n =
          ::pread(fd, copy + off, std::min(size_ - off, size_t(64) << 20), off_t(off));
      if (n <= 0) {
        ::close(fd);
        fail("cannot read {} at byte {}", path, off);
      }
      off += size_t(n);
      if (read != nullptr) read->add(size_t(n));
    }
  } else {
    region_size_ = size_;
    region_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (region_ == MAP_FAILED) {
      region_ = nullptr;
      ::close(fd);
      fail("cannot mmap {}", path);
    }
    data_ = static_cast<const uint8_t*>(region_);
  }
  ::close(fd);
  const uint8_t* base = data_;
  uint64_t header_len = 0;
  std::memcpy(&header_len, base, 8);
  if (header_len > size_ - 8)
    fail("{}: truncated safetensors file: header of {} bytes but the file has {}", path, header_len,
         size_);
  json header;
  try {
    header = json::parse(base + 8, base + 8 + header_len);
  } catch (const json::exception& e) {
    fail("{}: bad safetensors header JSON: {}", path, e.what());
  }
  if (!header.is_object()) fail("{}: safetensors header is not a JSON object", path);
  const uint8_t* data = base + 8 + header_len;
  const size_t data_size = size_ - 8 - header_len;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const json& e = it.value();
    const std::string& name = it.key();
    if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() || !e.contains("shape") ||
        !e["shape"].is_array() || !e.contains("data_offsets") || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2)
      fail("{}: tensor {}: header entry needs dtype, shape and two data_offsets", path, name);
    TensorView v;
    v.name = name;
    v.file = path;
    v.dtype_str = e["dtype"].get<std::string>();
    v.dtype = dtype_from_name(v.dtype_str);
    for (const json& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        fail("{}: tensor {}: bad shape {}", path, name, e["shape"].dump());
      v.shape.push_back(d.get<int64_t>());
    }
    const json& off = e["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail("{}: tensor {}: data_offsets must be non-negative integers", path, name);
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data_size)
      fail(
          "{}: tensor {}: data_offsets [{}, {}] lie outside the file's {} data bytes "
          "(truncated file?)",
          path, name, begin, end, data_size);
    size_t esize = v.dtype != DType::other ? dtype_size(v.dtype) : other_dtype_size(v.dtype_str);
    if (esize == 0) fail("{}: tensor {}: unknown dtype '{}'", path, name, v.dtype_str);
    if (uint64_t(v.numel()) * esize != end - begin)
      fail("{}: tensor {}: shape {} of {} needs {} bytes but data_offsets span {}", path, name,
           v.shape_str(), v.dtype_str, uint64_t(v.numel()) * esize, end - begin);
    v.data = data + begin;
    v.nbytes = end - begin;
    if (reinterpret_cast<uintptr_t>(v.data) % esize != 0)
      fail("{}: tensor {}: data is not aligned to its {}-byte elements", path, name, esize);
    tensors_.emplace(name, std::move(v));
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (region_) ::munmap(region_, region_size_);
}

TensorStore::TensorStore(const std::string& dir, Residency r) : dir_(dir), residency_(r) {
  if (!fs::is_directory(dir)) fail("checkpoint folder {} does not exist", dir);
  fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> shards;
  std::map<std::string, std::string> expected;  // tensor -> shard, from the index
  if (fs::exists(index_path)) {
    json idx = read_json_file(index_path.string());
    if (!idx.contains("weight_map") || !idx["weight_map"].is_object())
      fail("{}: missing 'weight_map' object", index_path.string());
    std::set<std::string> seen;
    for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        fail("{}: weight_map entry for {} is not a file name", index_path.string(), it.key());
      std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos)
        fail("{}: shard name '{}' must be a plain file name", index_path.string(), shard);
      expected[it.key()] = shard;
      if (seen.insert(shard).second) shards.push_back(shard);
    }
  } else if (fs::exists(fs::path(dir) / "model.safetensors")) {
    shards.push_back("model.safetensors");
  } else {
    fail("{}: no model.safetensors or model.safetensors.index.json", dir);
  }
  size_t total = 0;
  for (const std::string& shard : shards) {
    fs::path p = fs::path(dir) / shard;
    if (!fs::exists(p)) fail("{}: shard {} listed in the index is missing", dir, shard);
    total += size_t(fs::file_size(p));
  }
  if (residency_ == Residency::huge_pages) {
    if (const std::string why = huge_pages_unusable(total); !why.empty()) {
      spdlog::warn("{}: mapping the checkpoint, not reading it into 2 MB pages: {}", dir, why);
      residency_ = Residency::mapped;
    }
  }
  std::unique_ptr<Progress> read;
  if (residency_ == Residency::huge_pages)
    read = std::make_unique<Progress>("reading " + dir + " into 2 MB pages", total);
  for (const std::string& shard : shards) {
    fs::path p = fs::path(dir) / shard;
    files_.push_back(std::make_unique<SafetensorsFile>(p.string(), residency_, read.get()));
    for (const auto& [name, view] : files_.back()->tensors()) {
      if (!index_.emplace(name, &view).second)
        fail("{}: tensor {} appears in more than one shard", dir, name);
    }
  }
  for (const auto& [name, shard] : expected) {
    auto it = index_.find(name);
    if (it == index_.end())
      fail("{}: the index puts tensor {} in {}, but that file does not hold it", dir, name, shard);
  }
}

const TensorView* TensorStore::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const TensorView& TensorStore::get(const std::string& name) const {
  const TensorView* v = find(name);
  if (!v) fail("{}: missing tensor {}", dir_, name);
  return *v;
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> out;
  for (const auto& kv : index_) out.push_back(kv.first);
  return out;
}

void SafetensorsFile::prefault(Progress& p) const {
  if (!mapped_ || region_ == nullptr) return;
  const auto* b = static_cast<const volatile uint8_t*>(data_);
  constexpr size_t kPage = 4096, kStep = size_t(64) << 20;
  madvise(region_, size_, MADV_WILLNEED);
  for (size_t off = 0; off < size_; off += kStep) {
    const size_t end = std::min(size_, off + kStep);
    for (size_t i = off; i < end; i += kPage) (void)b[i];
    p.add(end - off);
  }
}

void SafetensorsFile::release(const uint8_t* p, size_t n) {
  if (mapped_ || p < data_ || p + n > data_ + size_ || n == 0) return;
  size_t begin = size_t(p - data_), end = begin + n;
  // Merge with the released ranges it overlaps or touches.
  auto it = released_.upper_bound(begin);
  if (it != released_.begin() && std::prev(it)->second >= begin) --it;
  while (it != released_.end() && it->first <= end) {
    begin = std::min(begin, it->first);
    end = std::max(end, it->second);
    it = released_.erase(it);
  }
  released_.emplace(begin, end);
  constexpr uintptr_t kPage = 4096;
  const uintptr_t a = (reinterpret_cast<uintptr_t>(data_ + begin) + kPage - 1) / kPage * kPage,
                  b = reinterpret_cast<uintptr_t>(data_ + end) / kPage * kPage;
  if (b > a) ::madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}

void TensorStore::release(const uint8_t* p, size_t n) {
  for (const auto& f : files_) f->release(p, n);
}

WeightBuffer::WeightBuffer(size_t bytes) {
  if (bytes >= kHugePage && huge_pages_unusable(bytes).empty())
    data_ = huge_region(bytes, region_, region_size_);
  if (data_ == nullptr) {
    data_ = static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
    if (data_ == nullptr) fail("out of memory: {} bytes for repacked weights", bytes);
  }
}

WeightBuffer::~WeightBuffer() {
  if (region_)
    ::munmap(region_, region_size_);
  else
    std::free(data_);
}

size_t TensorStore::mapped_bytes() const {
  size_t n = 0;
  for (const auto& f : files_) n += f->size();
  return n;
}

void TensorStore::prefault(Progress& p) const {
  for (const auto& f : files_) f->prefault(p);
}

}  // namespace tern
