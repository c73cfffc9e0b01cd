// GPT-2's byte-level alphabet: every byte is shown as a printable code point,
// so that vocabularies and merges can be stored as text. Bytes 33-126, 161-172
// and 174-255 stand for themselves; the other 68 take 256, 257, ... in order.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tern {

// The code point that shows byte b.
char32_t byte_level_char(uint8_t b);

// The bytes that a byte-level string stands for; nullopt if it has a code
// point outside the alphabet.
std::optional<std::string> byte_level_decode(std::string_view text);

}  // namespace tern
