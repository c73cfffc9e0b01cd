// Shared helpers for the tokenizer tests: fixture paths and a Qwen3 tokenizer
// loaded once per test process.
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tern::test {

inline std::string fixture(const std::string& rel) {
  return std::string(TERN_SOURCE_DIR) + "/../shared/fixtures/" + rel;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

inline const Tokenizer& qwen3() {
  static const Tokenizer tok = Tokenizer::load(fixture("tokenizer/qwen3"));
  return tok;
}

}  // namespace tern::test
