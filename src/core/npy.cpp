#include "core/npy.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>

#include "core/error.h"

namespace tern {

void write_npy_f32(const std::string& path, const std::vector<size_t>& shape, const float* data) {
  std::string dims;
  size_t count = 1;
  for (size_t d : shape) {
    dims += std::to_string(d) + ",";
    count *= d;
  }
  if (shape.size() > 1) dims.pop_back();
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) fail("cannot write {}", path);
  const char magic[] = "\x93NUMPY\x01\x00";
  f.write(magic, 8);
  uint16_t len = uint16_t(header.size());
  f.write(reinterpret_cast<const char*>(&len), 2);
  f << header;
  f.write(reinterpret_cast<const char*>(data), std::streamsize(count * sizeof(float)));
  if (!f) fail("write to {} failed", path);
}

NpyArray read_npy_f32(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open {}", path);
  char magic[8];
  f.read(magic, 8);
  if (!f || std::memcmp(magic, "\x93NUMPY", 6) != 0) fail("{}: not a .npy file", path);
  uint32_t hlen = 0;
  if (magic[6] == 1) {
    uint16_t h16;
    f.read(reinterpret_cast<char*>(&h16), 2);
    hlen = h16;
  } else {
    f.read(reinterpret_cast<char*>(&hlen), 4);
  }
  std::string header(hlen, '\0');
  f.read(header.data(), hlen);
  if (!f) fail("{}: truncated .npy header", path);
  if (header.find("'<f4'") == std::string::npos) fail("{}: only float32 .npy is supported", path);
  if (header.find("'fortran_order': False") == std::string::npos)
    fail("{}: Fortran-order .npy is not supported", path);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'shape': \\(([^)]*)\\)")))
    fail("{}: .npy header has no shape", path);
  NpyArray a;
  std::string dims = m[1];
  size_t count = 1, pos = 0;
  while (pos < dims.size()) {
    size_t comma = dims.find(',', pos);
    std::string tok =
        dims.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (tok.find_first_not_of(' ') != std::string::npos) {
      a.shape.push_back(std::stoul(tok));
      count *= a.shape.back();
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  a.data.resize(count);
  f.read(reinterpret_cast<char*>(a.data.data()), std::streamsize(count * sizeof(float)));
  if (!f) fail("{}: truncated .npy data", path);
  return a;
}

}  // namespace tern
