// JSON-lines input for the batch subcommands.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>

namespace tern::cli {

// Calls fn(object) for each non-blank line of `path` ("-" reads stdin), in
// order and with object keys in file order. A malformed line, a line that is
// not an object, or an Error thrown by fn stops the run with an Error that
// names the file and line.
void for_each_jsonl(const std::string& path,
                    const std::function<void(const nlohmann::ordered_json&)>& fn);

}  // namespace tern::cli
