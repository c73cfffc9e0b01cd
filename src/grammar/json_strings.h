// The strings a JSON Schema string allows, as code-point automata: length
// bounds, patterns and formats intersected, and substrings that must never
// appear (the tool-call format's closing tags) avoided.
#pragma once

#include <string>
#include <vector>

#include "grammar/char_fsa.h"

namespace tern::grammar {

struct StringRules {
  uint64_t min_length = 0;
  int64_t max_length = -1;  // -1: none
  std::vector<std::string> patterns, formats;
};

// Formats tern can enforce (docs/grammar.md says which language each is).
inline constexpr const char* kFormats =
    "date, time, date-time, uuid, email, hostname, ipv4, ipv6, uri, uri-reference";
bool supported_format(const std::string& format);
// Error for an unsupported format.
CharFsa format_language(const std::string& format);
// Strings containing none of `forbidden`.
CharFsa avoiding(const std::vector<std::string>& forbidden);
// The strings that satisfy every rule and contain none of `forbidden`.
CharFsa string_language(const StringRules& rules, const std::vector<std::string>& forbidden);

}  // namespace tern::grammar
