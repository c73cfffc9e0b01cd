#include "tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace tern {

namespace {

void append_nfc(std::string& out, std::string_view text) {
  utf8proc_uint8_t* dst = nullptr;
  auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                        utf8proc_ssize_t(text.size()), &dst,
                        utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) fail("NFC normalisation failed: {}", utf8proc_errmsg(n));
  out.append(reinterpret_cast<char*>(dst), size_t(n));
  std::free(dst);
}

}  // namespace

std::string nfc(std::string_view text) {
  // Normalisation never crosses the boundary before an ASCII character (a
  // starter that composes with nothing before it), so only the non-ASCII runs
  // and the character before each need utf8proc.
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    size_t run = i;
    while (run < text.size() && uint8_t(text[run]) < 0x80) ++run;
    if (run == text.size()) {
      out.append(text.substr(i));
      break;
    }
    size_t start = run > i ? run - 1 : run;
    out.append(text.substr(i, start - i));
    size_t end = run;
    while (end < text.size() && uint8_t(text[end]) >= 0x80) ++end;
    append_nfc(out, text.substr(start, end - start));
    i = end;
  }
  return out;
}

std::string onig_to_pcre2(std::string_view p) {
  // Oniguruma's \s is the Unicode White_Space property.
  static const std::string kSpace =
      R"(\t-\r\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000})";
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char e = p[++i];
      if (e == 's') {
        out += in_class ? kSpace : "[" + kSpace + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + kSpace + "]";
      } else if (std::strchr("ShHwWbBRXQK", e) != nullptr) {
        fail(
            "tokenizer regex: escape \\{} is not supported (its meaning differs between "
            "Oniguruma and PCRE2) in {}",
            e, p);
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ] is literal
      continue;
    }
    if (in_class && c == '[') {
      if (i + 1 < p.size() && p[i + 1] == ':') {  // POSIX class [:name:]
        size_t end = p.find(":]", i + 2);
        if (end == std::string_view::npos) fail("tokenizer regex: unterminated [: in {}", p);
        out.append(p.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
      fail("tokenizer regex: nested character classes are not supported in {}", p);
    }
    if (in_class && c == '&' && i + 1 < p.size() && p[i + 1] == '&')
      fail("tokenizer regex: class intersection && is not supported in {}", p);
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct SplitRegex::Code {
  pcre2_code* re = nullptr;
  ~Code() { pcre2_code_free(re); }
};

SplitRegex::SplitRegex(const std::string& pattern, bool literal) : code_(std::make_unique<Code>()) {
  std::string translated = literal ? pattern : onig_to_pcre2(pattern);
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK;
  // Oniguruma's Ruby syntax (used by tokenizers): ^ and $ are line anchors.
  options |= literal ? PCRE2_LITERAL : PCRE2_MULTILINE;
  int err = 0;
  PCRE2_SIZE err_off = 0;
  code_->re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                            options, &err, &err_off, nullptr);
  if (code_->re == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail("tokenizer regex {} does not compile at offset {}: {}", pattern, err_off,
         reinterpret_cast<const char*>(msg));
  }
  // Without JIT (unsupported CPU) pcre2_match interprets the pattern: slower, same result.
  pcre2_jit_compile(code_->re, PCRE2_JIT_COMPLETE);
}

SplitRegex::~SplitRegex() = default;
SplitRegex::SplitRegex(SplitRegex&&) noexcept = default;
SplitRegex& SplitRegex::operator=(SplitRegex&&) noexcept = default;

namespace {

// A JIT stack per thread, for matches that outgrow PCRE2's default 32 KiB.
pcre2_match_context* big_stack_context() {
  struct Ctx {
    pcre2_jit_stack* stack = pcre2_jit_stack_create(64 << 10, 256 << 20, nullptr);
    pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
    Ctx() { pcre2_jit_stack_assign(ctx, nullptr, stack); }
    ~Ctx() {
      pcre2_match_context_free(ctx);
      pcre2_jit_stack_free(stack);
    }
  };
  thread_local Ctx c;
  return c.ctx;
}

}  // namespace

void SplitRegex::split(std::string_view text,
                       const std::function<void(std::string_view)>& emit) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code_->re, nullptr), pcre2_match_data_free);
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0, gap = 0;  // next search start; start of the text not yet emitted
  while (pos < text.size()) {
    int rc =
        pcre2_match(code_->re, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
      rc = pcre2_match(code_->re, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(),
                       big_stack_context());
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("tokenizer regex: match failed (PCRE2 error {})", rc);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    size_t start = ov[0], end = ov[1];
    if (end == start) {  // empty match: contributes no piece; step over one character
      pos = start + 1;
      while (pos < text.size() && (uint8_t(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (start > gap) emit(text.substr(gap, start - gap));
    emit(text.substr(start, end - start));
    gap = pos = end;
  }
  if (gap < text.size()) emit(text.substr(gap));
}

}  // namespace tern
