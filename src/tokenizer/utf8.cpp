#include "tokenizer/utf8.h"

namespace tern::utf8 {
namespace {

struct Step {
  enum Kind { kValid, kInvalid, kIncomplete } kind;
  size_t len;  // bytes of the character, or of the maximal invalid subpart
};

// Classifies the sequence at s[i] per the Unicode table of well-formed UTF-8.
Step step(std::string_view s, size_t i) {
  auto b = uint8_t(s[i]);
  if (b < 0x80) return {Step::kValid, 1};
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return {Step::kInvalid, 1};
  }
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return {Step::kIncomplete, k};
    auto c = uint8_t(s[i + k]);
    bool ok = k == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) return {Step::kInvalid, k};
  }
  return {Step::kValid, need + 1};
}

}  // namespace

size_t find_invalid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (uint8_t(s[i]) < 0x80) {
      ++i;
      continue;
    }
    Step st = step(s, i);
    if (st.kind != Step::kValid) return i;
    i += st.len;
  }
  return std::string_view::npos;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

char32_t next(std::string_view s, size_t& i) {
  auto b = uint8_t(s[i++]);
  if (b < 0x80) return b;
  int extra = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : 1;
  char32_t cp = b & (0x3F >> extra);
  for (int k = 0; k < extra; ++k) cp = (cp << 6) | (uint8_t(s[i++]) & 0x3F);
  return cp;
}

size_t append_lossy(std::string& out, std::string_view s, bool final) {
  size_t i = 0;
  while (i < s.size()) {
    Step st = step(s, i);
    if (st.kind == Step::kValid) {
      out.append(s.substr(i, st.len));
    } else if (st.kind == Step::kIncomplete && !final) {
      return i;
    } else {
      out += "\xEF\xBF\xBD";
      if (st.kind == Step::kIncomplete) st.len = s.size() - i;
    }
    i += st.len;
  }
  return i;
}

}  // namespace tern::utf8
