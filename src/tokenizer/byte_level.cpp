#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace tern {
namespace {

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // code point -> byte, -1 if none (all are < 324)

  Tables() {
    to_byte.fill(-1);
    char32_t extra = 256;
    for (int b = 0; b < 256; ++b) {
      bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      to_char[b] = self ? char32_t(b) : extra++;
      to_byte[to_char[b]] = int16_t(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_level_char(uint8_t b) {
  return tables().to_char[b];
}

std::optional<std::string> byte_level_decode(std::string_view text) {
  if (utf8::find_invalid(text) != std::string_view::npos) return std::nullopt;
  const auto& to_byte = tables().to_byte;
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t cp = utf8::next(text, i);
    if (cp >= to_byte.size() || to_byte[cp] < 0) return std::nullopt;
    out += char(to_byte[cp]);
  }
  return out;
}

}  // namespace tern
