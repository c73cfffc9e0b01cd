// Read-only access to safetensors checkpoints, mapped (mmap) or read into
// anonymous memory in 2 MB pages: one file, or a sharded set listed by
// model.safetensors.index.json. Every header is checked
// (JSON, dtypes, shapes against byte ranges, ranges inside the file) and every
// problem is an error naming the file and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/progress.h"

namespace tern {

enum class DType { bf16, f16, f32, u32, other };

const char* dtype_name(DType t);
size_t dtype_size(DType t);  // 0 for `other`
DType dtype_from_name(const std::string& s);

struct TensorView {
  std::string name;
  std::string file;
  DType dtype = DType::other;
  std::string dtype_str;  // as written in the file
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const;
  std::string shape_str() const;
};

std::string shape_to_string(const std::vector<int64_t>& shape);

// Where a checkpoint's bytes live. mapped: the file's pages (the page cache,
// shared and evictable; 4 KB pages). huge_pages: a private copy in anonymous
// memory advised into 2 MB pages (transparent huge pages), which a CPU decode
// step streams with far fewer TLB misses (docs/cpu-backend.md: +3-13%).
enum class Residency { mapped, huge_pages };

// One safetensors file.
class SafetensorsFile {
 public:
  // huge_pages reads the file in, counting its bytes on `read` (non-null).
  SafetensorsFile(const std::string& path, Residency r = Residency::mapped,
                  Progress* read = nullptr);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::string& path() const { return path_; }
  size_t size() const { return size_; }
  // Reads every page, so later use runs from memory (reports its bytes); a
  // file read into memory has nothing to do.
  void prefault(Progress& p) const;
  // huge_pages: gives back the whole 4 KB pages of [p, p + n) and of the
  // released bytes around it (no-op for mapped files or bytes not in this file).
  // Released bytes read as zeros afterwards.
  void release(const uint8_t* p, size_t n);

 private:
  std::string path_;
  void* region_ = nullptr;  // what munmap takes
  size_t region_size_ = 0;
  const uint8_t* data_ = nullptr;  // the file's first byte
  size_t size_ = 0;
  bool mapped_ = true;
  std::map<std::string, TensorView> tensors_;
  std::map<size_t, size_t> released_;  // byte offset -> end, disjoint, not touching
};

// All tensors of a checkpoint folder.
class TensorStore {
 public:
  // huge_pages falls back to mapped (with a warning) where transparent huge
  // pages are off or the files would not fit in the memory available.
  explicit TensorStore(const std::string& dir, Residency r = Residency::mapped);

  bool has(const std::string& name) const { return index_.count(name) != 0; }
  const TensorView& get(const std::string& name) const;
  const TensorView* find(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::string& dir() const { return dir_; }
  size_t mapped_bytes() const;  // the files' bytes (mapped or read in)
  // Reads the whole checkpoint into the page cache, with progress.
  void prefault(Progress& p) const;
  Residency residency() const { return residency_; }
  // Gives the memory of bytes no matrix reads any more back to the system
  // (huge_pages: a matrix repacked elsewhere, see SafetensorsFile::release).
  void release(const uint8_t* p, size_t n);

 private:
  std::string dir_;
  Residency residency_ = Residency::mapped;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

// Anonymous memory owned by the weights (matrices repacked at load): 2 MB
// pages where it is at least that large and transparent huge pages allow, else
// 64-byte aligned.
class WeightBuffer {
 public:
  explicit WeightBuffer(size_t bytes);
  ~WeightBuffer();
  WeightBuffer(const WeightBuffer&) = delete;
  WeightBuffer& operator=(const WeightBuffer&) = delete;
  uint8_t* data() { return data_; }

 private:
  void* region_ = nullptr;  // what munmap takes (null: data_ is from aligned_alloc)
  size_t region_size_ = 0;
  uint8_t* data_ = nullptr;
};

}  // namespace tern
