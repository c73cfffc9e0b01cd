#include "grammar/codepoints.h"

#include <algorithm>

namespace tern::grammar {

CodepointSet CodepointSet::range(uint32_t lo, uint32_t hi) {
  CodepointSet s;
  s.add(lo, hi);
  return s;
}

void CodepointSet::add(uint32_t lo, uint32_t hi) {
  if (lo > hi) return;
  auto it = std::lower_bound(ranges_.begin(), ranges_.end(), lo,
                             [](const CpRange& r, uint32_t v) { return r.hi + 1 < v; });
  // `it` is the first range that ends at or after lo - 1: merge every range touching [lo, hi].
  auto end = it;
  while (end != ranges_.end() && end->lo <= hi + 1) {
    lo = std::min(lo, end->lo);
    hi = std::max(hi, end->hi);
    ++end;
  }
  it = ranges_.erase(it, end);
  ranges_.insert(it, CpRange{lo, hi});
}

void CodepointSet::add(const CodepointSet& o) {
  for (const CpRange& r : o.ranges_) add(r.lo, r.hi);
}

CodepointSet CodepointSet::complement() const {
  CodepointSet out;
  uint32_t next = 0;
  for (const CpRange& r : ranges_) {
    if (r.lo > next) out.ranges_.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodepoint) out.ranges_.push_back({next, kMaxCodepoint});
  return out;
}

CodepointSet CodepointSet::intersect(const CodepointSet& o) const {
  CodepointSet out;
  size_t i = 0, j = 0;
  while (i < ranges_.size() && j < o.ranges_.size()) {
    uint32_t lo = std::max(ranges_[i].lo, o.ranges_[j].lo);
    uint32_t hi = std::min(ranges_[i].hi, o.ranges_[j].hi);
    if (lo <= hi) out.ranges_.push_back({lo, hi});
    if (ranges_[i].hi < o.ranges_[j].hi)
      ++i;
    else
      ++j;
  }
  return out;
}

bool CodepointSet::contains(uint32_t cp) const {
  auto it = std::lower_bound(ranges_.begin(), ranges_.end(), cp,
                             [](const CpRange& r, uint32_t v) { return r.hi < v; });
  return it != ranges_.end() && it->lo <= cp;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | cp >> 6);
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | cp >> 12);
    out += char(0x80 | (cp >> 6 & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | cp >> 18);
    out += char(0x80 | (cp >> 12 & 0x3F));
    out += char(0x80 | (cp >> 6 & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

int64_t decode_utf8(std::string_view s, size_t& pos) {
  auto b = [&](size_t i) { return uint8_t(s[i]); };
  uint8_t c = b(pos);
  int n = c < 0x80                ? 1
          : c >= 0xC2 && c < 0xE0 ? 2
          : c >= 0xE0 && c < 0xF0 ? 3
          : c >= 0xF0 && c < 0xF5 ? 4
                                  : 0;
  if (n == 0 || pos + size_t(n) > s.size()) return -1;
  uint32_t cp = n == 1 ? c : c & (0x7F >> n);
  for (int i = 1; i < n; ++i) {
    if ((b(pos + size_t(i)) & 0xC0) != 0x80) return -1;
    cp = cp << 6 | (b(pos + size_t(i)) & 0x3F);
  }
  static const uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > kMaxCodepoint || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
  pos += size_t(n);
  return cp;
}

namespace {

// Byte strings x of the "box" lo[k]..hi[k] per position (position 0: the lead
// bytes of one encoded length, then continuation bytes) with a <= x <= b in
// lexicographic order, from position k on. `a_min` / `b_max`: that side is
// already passed (an earlier byte was strictly inside), so it is unbounded.
ExprPtr box_range(const std::string& a, const std::string& b, size_t k, bool a_min, bool b_max,
                  uint8_t lead_lo, uint8_t lead_hi) {
  if (k == a.size()) return empty();
  const uint8_t lo = k == 0 ? lead_lo : 0x80, hi = k == 0 ? lead_hi : 0xBF;
  if (a_min && b_max)
    return seq({byte_range(lo, hi), box_range(a, b, k + 1, true, true, lead_lo, lead_hi)});
  const uint8_t x = a_min ? lo : uint8_t(a[k]), y = b_max ? hi : uint8_t(b[k]);
  if (x == y)
    return seq({byte_range(x, x), box_range(a, b, k + 1, a_min, b_max, lead_lo, lead_hi)});
  // x followed by anything >= a's tail; the bytes between; y followed by <= b's tail.
  std::vector<ExprPtr> alts;
  alts.push_back(seq({byte_range(x, x), box_range(a, b, k + 1, a_min, true, lead_lo, lead_hi)}));
  if (y > x + 1)
    alts.push_back(seq({byte_range(uint8_t(x + 1), uint8_t(y - 1)),
                        box_range(a, b, k + 1, true, true, lead_lo, lead_hi)}));
  alts.push_back(seq({byte_range(y, y), box_range(a, b, k + 1, true, b_max, lead_lo, lead_hi)}));
  return alt(std::move(alts));
}

ExprPtr utf8_range(uint32_t lo, uint32_t hi) {
  struct Class {
    uint32_t lo, hi;
    uint8_t lead_lo, lead_hi;
  };
  static const Class kClasses[] = {{0, 0x7F, 0x00, 0x7F},
                                   {0x80, 0x7FF, 0xC2, 0xDF},
                                   {0x800, 0xFFFF, 0xE0, 0xEF},
                                   {0x10000, kMaxCodepoint, 0xF0, 0xF4}};
  std::vector<ExprPtr> alts;
  for (const Class& c : kClasses) {
    uint32_t l = std::max(lo, c.lo), h = std::min(hi, c.hi);
    if (l > h) continue;
    std::string a, b;
    append_utf8(l, a);
    append_utf8(h, b);
    alts.push_back(box_range(a, b, 0, false, false, c.lead_lo, c.lead_hi));
  }
  return alt(std::move(alts));
}

}  // namespace

ExprPtr utf8_class(const CodepointSet& set) {
  const CodepointSet valid = set.minus(CodepointSet::range(0xD800, 0xDFFF));
  std::vector<ExprPtr> alts;
  for (const CpRange& r : valid.ranges()) alts.push_back(utf8_range(r.lo, r.hi));
  return alt(std::move(alts));
}

}  // namespace tern::grammar
