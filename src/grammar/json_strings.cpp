#include "grammar/json_strings.h"

#include <map>
#include <set>

#include "core/error.h"
#include "grammar/regex.h"

namespace tern::grammar {
namespace {

// RFC 3986's IPv6address: eight groups of 1-4 hex digits, one run of zero
// groups written "::", the last two groups possibly an IPv4 address.
std::string ipv6(const std::string& ipv4) {
  const std::string h16 = "[0-9a-fA-F]{1,4}";
  const std::string ls32 = fmt::format("(?:{0}:{0}|{1})", h16, ipv4);
  std::string alts = fmt::format("(?:{}:){{6}}{}", h16, ls32);
  // Form i: up to i groups before "::", as many after as make eight.
  for (int i = 0; i <= 7; ++i) {
    const std::string head = i == 0 ? "" : fmt::format("(?:(?:{0}:){{0,{1}}}{0})?", h16, i - 1);
    const std::string tail = i <= 4   ? fmt::format("(?:{}:){{{}}}{}", h16, 5 - i, ls32)
                             : i == 5 ? ls32
                             : i == 6 ? h16
                                      : "";
    alts += fmt::format("|{}::{}", head, tail);
  }
  return fmt::format("(?:{})", alts);
}

// RFC 3339 full-date with calendar days (leap years included) and years 0001-9999,
// full-time (seconds 00-59, an offset), and the other formats, as anchored patterns.
const std::map<std::string, std::string>& format_patterns() {
  static const std::string date =
      "(?:(?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})-(?:(?:0[13578]|1[02])-(?:0[1-9]|"
      "[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[0-9]"
      "{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)-02-29)";
  static const std::string time =
      "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5]"
      "[0-9])";
  static const std::string atext = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
  static const std::string label = "[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?";
  static const std::string octet = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
  static const std::string ipv4 = fmt::format("{0}(?:\\.{0}){{3}}", octet);
  // URIs (RFC 3986, its characters; the parts' finer grammar not enforced):
  // a scheme, then unreserved / sub-delims / ":@/?" / "[]" / percent escapes,
  // then an optional "#" fragment. A relative reference has no colon before
  // its first "/", "?" or "#".
  static const std::string uric = "(?:[A-Za-z0-9._~!$&'()*+,;=:@/?\\[\\]-]|%[0-9A-Fa-f]{2})";
  static const std::string segment_nc = "(?:[A-Za-z0-9._~!$&'()*+,;=@-]|%[0-9A-Fa-f]{2})";
  static const std::string fragment = fmt::format("(?:#{}*)?", uric);
  static const std::string uri = fmt::format("[A-Za-z][A-Za-z0-9+.-]*:{}*{}", uric, fragment);
  // RFC 1123 host names: dot-separated labels of 1-63 letters, digits and
  // inner hyphens (the 253-character total not enforced).
  static const std::string host_label = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
  static const std::map<std::string, std::string> m = {
      {"date", "^" + date + "$"},
      {"time", "^" + time + "$"},
      {"date-time", "^" + date + "T" + time + "$"},
      {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
      {"email", "^" + atext + "(?:\\." + atext + ")*@" + label + "(?:\\." + label + ")+$"},
      {"ipv4", fmt::format("^{}$", ipv4)},
      {"ipv6", fmt::format("^{}$", ipv6(ipv4))},
      {"hostname", fmt::format("^{0}(?:\\.{0})*$", host_label)},
      {"uri", fmt::format("^{}$", uri)},
      {"uri-reference", fmt::format("^(?:{}|{}*(?:[/?]{}*)?{})$", uri, segment_nc, uric, fragment)},
  };
  return m;
}

}  // namespace

bool supported_format(const std::string& format) {
  return format_patterns().count(format) != 0;
}

CharFsa format_language(const std::string& format) {
  auto it = format_patterns().find(format);
  if (it == format_patterns().end())
    fail("JSON Schema: format '{}' is not supported (tern enforces {})", format, kFormats);
  return pattern_language(it->second);
}

CharFsa avoiding(const std::vector<std::string>& forbidden) {
  // States are the prefixes of forbidden strings (as code points); a character
  // goes to the longest prefix that ends the text so far; a whole forbidden
  // string has no state.
  std::vector<std::u32string> words;
  for (const std::string& f : forbidden) {
    std::u32string w;
    for (size_t pos = 0; pos < f.size();) {
      int64_t cp = decode_utf8(f, pos);
      if (cp < 0) fail("a forbidden substring is not UTF-8");
      w += char32_t(cp);
    }
    if (!w.empty()) words.push_back(std::move(w));
  }
  std::map<std::u32string, int> ids = {{U"", 0}};
  std::vector<std::u32string> prefix = {U""};
  std::set<char32_t> alphabet;
  for (const auto& w : words)
    for (size_t n = 1; n < w.size(); ++n)
      if (ids.emplace(w.substr(0, n), int(prefix.size())).second) prefix.push_back(w.substr(0, n));
  for (const auto& w : words) alphabet.insert(w.begin(), w.end());
  CharFsa a;
  for (size_t s = 1; s < prefix.size(); ++s) a.add_state();
  auto is_word = [&](const std::u32string& t) {
    for (const auto& w : words)
      if (t.size() >= w.size() && t.compare(t.size() - w.size(), w.size(), w) == 0) return true;
    return false;
  };
  CodepointSet others = CodepointSet::all();
  for (char32_t c : alphabet) others = others.minus(CodepointSet::range(uint32_t(c), uint32_t(c)));
  for (size_t s = 0; s < prefix.size(); ++s) {
    a.set_final(int(s));
    a.add_edges(int(s), others, 0);
    for (char32_t c : alphabet) {
      std::u32string t = prefix[s] + c;
      if (is_word(t)) continue;  // a forbidden string would be complete
      while (!ids.count(t)) t.erase(0, 1);
      a.add_edge(int(s), uint32_t(c), uint32_t(c), ids[t]);
    }
  }
  return a;
}

CharFsa string_language(const StringRules& rules, const std::vector<std::string>& forbidden) {
  CharFsa a = fsa_repeat(CodepointSet::all(), int(rules.min_length), int(rules.max_length));
  for (const std::string& p : rules.patterns) a = fsa_intersect(a, pattern_language(p));
  for (const std::string& f : rules.formats) a = fsa_intersect(a, format_language(f));
  if (!forbidden.empty()) a = fsa_intersect(a, avoiding(forbidden));
  return a;
}

}  // namespace tern::grammar
