#include "checkpoint/fingerprint.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "core/hash.h"

namespace tern {

namespace {

namespace fs = std::filesystem;
constexpr size_t kEnd = size_t(1) << 20;  // bytes hashed at each end of a weights file

// Bytes [at, at + n) of the file into h.
void hash_range(Hash64& h, const fs::path& p, size_t at, size_t n) {
  std::ifstream f(p, std::ios::binary);
  std::vector<char> buf(n);
  f.seekg(std::streamoff(at));
  if (!f.read(buf.data(), std::streamsize(n))) fail("cannot read {}", p.string());
  h.update(buf.data(), n);
}

void hash_text(Hash64& h, const std::string& s) {
  const uint64_t n = s.size();
  h.update(&n, sizeof n);
  h.update(s.data(), s.size());
}

}  // namespace

std::string model_fingerprint(const std::string& dir) {
  Hash64 h;
  for (const char* whole : {"config.json", "model.safetensors.index.json"}) {
    const fs::path p = fs::path(dir) / whole;
    hash_text(h, whole);
    if (fs::exists(p)) hash_range(h, p, 0, size_t(fs::file_size(p)));
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) fail("cannot stat {}", p.string());
    const uint64_t meta[3] = {uint64_t(st.st_size), uint64_t(st.st_mtim.tv_sec),
                              uint64_t(st.st_mtim.tv_nsec)};
    hash_text(h, p.filename().string());
    h.update(meta, sizeof meta);
    const size_t size = size_t(st.st_size), n = std::min(size, kEnd);
    hash_range(h, p, 0, n);
    hash_range(h, p, size - n, n);
  }
  return hex64(h.digest());
}

}  // namespace tern
