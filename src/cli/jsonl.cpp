#include "cli/jsonl.h"

#include <fstream>
#include <iostream>

#include "core/error.h"

namespace tern::cli {

void for_each_jsonl(const std::string& path,
                    const std::function<void(const nlohmann::ordered_json&)>& fn) {
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) fail("cannot open {}", path);
  }
  std::istream& in = path == "-" ? std::cin : file;
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::ordered_json obj;
    try {
      obj = nlohmann::ordered_json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail("{}:{}: malformed JSON: {}", path, number, e.what());
    }
    if (!obj.is_object()) fail("{}:{}: expected a JSON object", path, number);
    try {
      fn(obj);
    } catch (const Error& e) {
      fail("{}:{}: {}", path, number, e.what());
    }
  }
}

}  // namespace tern::cli
