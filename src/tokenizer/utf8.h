// UTF-8 helpers: validation, code point iteration, and the lossy conversion
// that Hugging Face decoders use (Rust's String::from_utf8_lossy).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tern::utf8 {

// Offset of the first byte that is not part of valid UTF-8, or npos.
size_t find_invalid(std::string_view s);

// Appends the UTF-8 encoding of code point cp.
void append(std::string& out, char32_t cp);

// Decodes the code point at s[i] and advances i (s must be valid UTF-8).
char32_t next(std::string_view s, size_t& i);

// Appends s to out with each maximal invalid subpart replaced by U+FFFD, as
// from_utf8_lossy does. If `final` is false, a trailing sequence that may
// still become valid is left unconsumed. Returns the bytes consumed.
size_t append_lossy(std::string& out, std::string_view s, bool final);

}  // namespace tern::utf8
