#include "engine/cache_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace tern {

namespace {

constexpr char kMagic[8] = {'T', 'E', 'R', 'N', 'C', 'A', 'C', 'H'};
// magic, version, kind, binding, key, parent, start, end, payload bytes,
// checksum, binding text length, the header's own hash; then the text.
constexpr size_t kFixed = 8 + 4 + 4 + 8 * 7 + 4 + 8;
constexpr size_t kMaxBindingText = 4096;

template <typename T>
void put_le(unsigned char* at, T v) {
  std::memcpy(at, &v, sizeof v);  // little-endian hosts
}
template <typename T>
T get_le(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::vector<unsigned char> encode(const EntryHeader& h) {
  std::vector<unsigned char> out(kFixed + h.binding_text.size());
  unsigned char* p = out.data();
  std::memcpy(p, kMagic, 8);
  put_le(p + 8, kCacheFormatVersion);
  put_le(p + 12, uint32_t(h.kind));
  const uint64_t f[7] = {h.binding,       h.key,           h.parent,  uint64_t(h.start),
                         uint64_t(h.end), h.payload_bytes, h.checksum};
  for (int i = 0; i < 7; ++i) put_le(p + 16 + 8 * i, f[i]);
  put_le(p + 72, uint32_t(h.binding_text.size()));
  std::memcpy(p + kFixed, h.binding_text.data(), h.binding_text.size());
  Hash64 self;
  self.update(p, 76);
  self.update(h.binding_text.data(), h.binding_text.size());
  put_le(p + 76, self.digest());
  return out;
}

std::string errno_text() {
  return std::strerror(errno);
}

// Reads exactly out.size() bytes at the file's position; false at its end.
bool read_all(int fd, std::span<std::byte> out) {
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("read failed: {}", errno_text());
    if (n == 0) return false;
    got += size_t(n);
  }
  return true;
}

}  // namespace

const char* kind_name(EntryKind k) {
  return k == EntryKind::kv ? "kv" : "state";
}

uint64_t EntryHeader::data_offset() const {
  return kFixed + binding_text.size();
}

uint64_t EntryHeader::file_bytes() const {
  return data_offset() + uint64_t(end - start) * sizeof(int32_t) + payload_bytes;
}

std::string entry_name(EntryKind kind, uint64_t key) {
  return hex64(key) + "." + kind_name(kind);
}

std::optional<EntryName> parse_entry_name(const std::string& name) {
  const size_t dot = name.find('.');
  if (dot != 16) return std::nullopt;
  const std::string ext = name.substr(17);
  if (ext != "kv" && ext != "state") return std::nullopt;
  uint64_t key = 0;
  for (size_t i = 0; i < 16; ++i) {
    const char c = name[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return std::nullopt;
    key = key << 4 | uint64_t(d);
  }
  return EntryName{ext == "kv" ? EntryKind::kv : EntryKind::state, key};
}

uint64_t prefix_key(uint64_t binding, std::span<const int32_t> ids) {
  PrefixHash h(binding);
  h.add(ids);
  return h.key();
}

EntryWriter::EntryWriter(const std::string& dir, EntryHeader h)
    : dir_(dir), tmp_(dir + "/" + kTempPrefix + "XXXXXX"), h_(std::move(h)) {
  fd_ = ::mkostemp(tmp_.data(), O_CLOEXEC);  // mode 0600
  if (fd_ < 0) fail("cannot create a file in {}: {}", dir_, errno_text());
  try {
    put(encode(h_).data(), h_.data_offset());  // rewritten by commit()
  } catch (...) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
    throw;
  }
}

EntryWriter::~EntryWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void EntryWriter::put(const void* p, size_t n) {
  auto* at = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd_, at, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail("cannot write {}: {}", tmp_, errno_text());
    at += w, n -= size_t(w);
  }
}

void EntryWriter::write(std::span<const std::byte> bytes) {
  sum_.update(bytes.data(), bytes.size());
  put(bytes.data(), bytes.size());
  written_ += bytes.size();
}

uint64_t EntryWriter::commit() {
  TERN_CHECK(written_ == h_.file_bytes() - h_.data_offset());
  h_.checksum = sum_.digest();
  const std::vector<unsigned char> head = encode(h_);
  if (::pwrite(fd_, head.data(), head.size(), 0) != ssize_t(head.size()))
    fail("cannot write {}: {}", tmp_, errno_text());
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    ::unlink(tmp_.c_str());
    fail("cannot write {}: {}", tmp_, errno_text());
  }
  const std::string path = dir_ + "/" + entry_name(h_.kind, h_.key);
  if (::rename(tmp_.c_str(), path.c_str()) != 0) {
    ::unlink(tmp_.c_str());
    fail("cannot rename {} to {}: {}", tmp_, path, errno_text());
  }
  return h_.file_bytes();
}

EntryReader::EntryReader(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd_ < 0) fail("{}: cannot open: {}", path, errno_text());
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) fail("{}: not a regular file", path);
  unsigned char fixed[kFixed];
  if (!read_all(fd_, std::as_writable_bytes(std::span(fixed))) ||
      std::memcmp(fixed, kMagic, 8) != 0)
    fail("{}: not a tern cache file", path);
  if (get_le<uint32_t>(fixed + 8) != kCacheFormatVersion)
    fail("{}: format version {}, not {}", path, get_le<uint32_t>(fixed + 8), kCacheFormatVersion);
  const uint32_t kind = get_le<uint32_t>(fixed + 12);
  if (kind != uint32_t(EntryKind::kv) && kind != uint32_t(EntryKind::state))
    fail("{}: unknown entry kind {}", path, kind);
  h_.kind = EntryKind(kind);
  uint64_t f[7];
  for (int i = 0; i < 7; ++i) f[i] = get_le<uint64_t>(fixed + 16 + 8 * i);
  h_.binding = f[0], h_.key = f[1], h_.parent = f[2];
  h_.start = int64_t(f[3]), h_.end = int64_t(f[4]);
  h_.payload_bytes = f[5], h_.checksum = f[6];
  const uint32_t text = get_le<uint32_t>(fixed + 72);
  if (text > kMaxBindingText) fail("{}: damaged header", path);
  h_.binding_text.resize(text);
  if (!read_all(fd_, std::as_writable_bytes(std::span(h_.binding_text))))
    fail("{}: truncated header", path);
  // Re-encoding what was read reproduces the header's own hash only if intact.
  if (std::memcmp(encode(h_).data(), fixed, kFixed) != 0 || h_.start < 0 || h_.end < h_.start ||
      (h_.kind == EntryKind::state && h_.start != 0))
    fail("{}: damaged header", path);
  if (uint64_t(st.st_size) != h_.file_bytes())
    fail("{}: {} bytes, its header says {} (truncated?)", path, st.st_size, h_.file_bytes());
  pos_ = h_.data_offset();
}

EntryReader::~EntryReader() {
  if (fd_ >= 0) ::close(fd_);
}

void EntryReader::read(std::span<std::byte> out) {
  if (!read_all(fd_, out)) fail("{}: truncated", path_);
  sum_.update(out.data(), out.size());
  pos_ += out.size();
}

void EntryReader::finish() {
  if (pos_ != h_.file_bytes()) fail("{}: {} bytes not read", path_, h_.file_bytes() - pos_);
  if (sum_.digest() != h_.checksum) fail("{}: damaged (its checksum does not match)", path_);
}

void EntryReader::touch() {
  ::futimens(fd_, nullptr);
}

}  // namespace tern
