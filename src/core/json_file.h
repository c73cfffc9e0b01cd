// Reading a JSON file with errors that name the file.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace tern {

nlohmann::json read_json_file(const std::string& path);

}  // namespace tern
