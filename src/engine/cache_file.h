// One file of the disk cache (disk_cache.h): a header (its own hash
// included), the token ids the entry holds (int32), then the payload, the
// backend's bytes (export_kv or export_state), with a hash of ids and
// payload that a load verifies. Nothing else: no text. Written to a
// temporary name (0600) and renamed when complete, so a reader sees a whole
// file or none; a power loss may still leave a torn one, which the hashes catch.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "core/hash.h"

namespace tern {

inline constexpr uint32_t kCacheFormatVersion = 1;
// Names of its own beside the entries: files being written, the lock.
inline constexpr const char* kTempPrefix = ".tern-tmp-";
inline constexpr const char* kLockName = ".tern-lock";

// kv: the KV rows of positions [start, end), `parent` the key of [0, start)
// (0 when start is 0); state: the recurrent and conv state after `end`
// tokens, start 0 (all its tokens are kept for the match check).
enum class EntryKind : uint32_t { kv = 1, state = 2 };
const char* kind_name(EntryKind k);

struct EntryHeader {
  EntryKind kind = EntryKind::kv;
  uint64_t binding = 0;  // hash64(binding_text)
  uint64_t key = 0;      // prefix_key of its tokens [0, end)
  uint64_t parent = 0;
  int64_t start = 0, end = 0;
  uint64_t payload_bytes = 0;
  uint64_t checksum = 0;         // hash64 of the token ids and the payload
  std::string binding_text;      // the model, numerics, plan and build it is bound to
  uint64_t data_offset() const;  // where the token ids start
  uint64_t file_bytes() const;
};

// "<key in hex>.kv" or ".state": names derive from hashes only.
std::string entry_name(EntryKind kind, uint64_t key);
struct EntryName {
  EntryKind kind;
  uint64_t key;
};
std::optional<EntryName> parse_entry_name(const std::string& name);

// The key of a token prefix: hash64 of its ids, seeded with the binding.
class PrefixHash {
 public:
  explicit PrefixHash(uint64_t binding) : h_(binding) {}
  void add(std::span<const int32_t> ids) { h_.update(ids.data(), ids.size_bytes()); }
  uint64_t key() const { return h_.digest(); }

 private:
  Hash64 h_;
};
uint64_t prefix_key(uint64_t binding, std::span<const int32_t> ids);

// Writes one entry: the token ids, then payload bytes, then commit().
class EntryWriter {
 public:
  EntryWriter(const std::string& dir, EntryHeader h);
  ~EntryWriter();  // an uncommitted file is removed
  EntryWriter(const EntryWriter&) = delete;
  EntryWriter& operator=(const EntryWriter&) = delete;
  void write(std::span<const std::byte> bytes);
  // Checks the sizes, writes the header and renames the file to its name.
  // Returns the file's bytes.
  uint64_t commit();

 private:
  void put(const void* p, size_t n);
  std::string dir_, tmp_;
  EntryHeader h_;
  int fd_ = -1;
  uint64_t written_ = 0;
  Hash64 sum_;
};

// Reads one entry; every failure is a tern::Error naming the file and what
// is wrong with it (damaged, truncated, not a cache file).
class EntryReader {
 public:
  explicit EntryReader(const std::string& path);
  ~EntryReader();
  EntryReader(const EntryReader&) = delete;
  EntryReader& operator=(const EntryReader&) = delete;
  const EntryHeader& header() const { return h_; }
  void read(std::span<std::byte> out);
  // Everything was read and the hash matches.
  void finish();
  void touch();  // its modification time to now: the LRU order across restarts

 private:
  std::string path_;
  EntryHeader h_;
  int fd_ = -1;
  uint64_t pos_ = 0;
  Hash64 sum_;
};

}  // namespace tern
