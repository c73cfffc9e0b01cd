// Byte sizes on the command line: "4G", "512M", "64K", "0", or plain bytes.
#pragma once

#include <cstddef>
#include <string>

namespace tern::cli {

size_t parse_size(const std::string& s, const std::string& flag);

}  // namespace tern::cli
