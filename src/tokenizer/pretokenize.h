// The text stages before BPE: Unicode normalisation and the regex "Split"
// pre-tokenizer of tokenizer.json (compiled with PCRE2).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace tern {

// Unicode NFC of valid UTF-8 text.
std::string nfc(std::string_view text);

// Rewrites a tokenizer.json regex (Oniguruma syntax) for PCRE2: \s and \S
// become Oniguruma's White_Space set (PCRE2 also counts U+180E); escapes and
// constructs whose meaning differs between the two engines are an error.
std::string onig_to_pcre2(std::string_view pattern);

// Hugging Face's Split pre-tokenizer with behavior "Isolated": every match and
// every gap between matches becomes its own piece.
class SplitRegex {
 public:
  // `literal`: the pattern is a plain string ({"String": ...}), not a regex.
  SplitRegex(const std::string& pattern, bool literal);
  ~SplitRegex();
  SplitRegex(SplitRegex&&) noexcept;
  SplitRegex& operator=(SplitRegex&&) noexcept;

  // Calls emit(piece) for each piece of `text` (valid UTF-8), in order.
  void split(std::string_view text, const std::function<void(std::string_view)>& emit) const;

 private:
  struct Code;
  std::unique_ptr<Code> code_;
};

}  // namespace tern
