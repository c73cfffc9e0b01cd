#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json_file.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/segment_cache.h"
#include "tokenizer/utf8.h"

namespace tern {
namespace {

using json = nlohmann::json;

// Added tokens are found by a left-to-right scan: the earliest occurrence of
// any of them, the longest when several start at the same byte.
class AddedMatcher {
 public:
  void add(std::string text, int32_t id) {
    auto& list = by_first_[uint8_t(text[0])];
    list.push_back({std::move(text), id});
    std::stable_sort(list.begin(), list.end(),
                     [](const Entry& a, const Entry& b) { return a.text.size() > b.text.size(); });
  }

  // Calls on_text(segment) for the text between matches, on_token(id) for matches.
  template <typename OnText, typename OnToken>
  void split(std::string_view text, OnText&& on_text, OnToken&& on_token) const {
    size_t start = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      for (const Entry& e : by_first_[uint8_t(text[i])]) {
        if (text.compare(i, e.text.size(), e.text) != 0) continue;
        if (i > start) on_text(text.substr(start, i - start));
        on_token(e.id);
        start = i + e.text.size();
        i = start - 1;
        break;
      }
    }
    if (start < text.size()) on_text(text.substr(start));
  }

 private:
  struct Entry {
    std::string text;
    int32_t id;
  };
  std::array<std::vector<Entry>, 256> by_first_;
};

const json& member(const json& obj, const char* key) {
  static const json null;
  auto it = obj.find(key);
  return it == obj.end() ? null : *it;
}

std::string type_of(const json& component) {
  const json& t = member(component, "type");
  return t.is_string() ? t.get<std::string>() : "(no type)";
}

bool flag(const json& obj, const char* key) {
  const json& v = member(obj, key);
  if (v.is_null()) return false;
  if (!v.is_boolean()) fail("tokenizer.json: '{}' must be true or false", key);
  return v.get<bool>();
}

bool empty_string_or_null(const json& v) {
  return v.is_null() || (v.is_string() && v.get_ref<const std::string&>().empty());
}

std::string chat_template_from_config(const json& config) {
  const json& tpl = member(config, "chat_template");
  if (tpl.is_string()) return tpl.get<std::string>();
  if (tpl.is_array())  // named templates: take "default"
    for (const json& t : tpl)
      if (member(t, "name") == "default" && member(t, "template").is_string())
        return t["template"].get<std::string>();
  return {};
}

// Newer checkpoints keep the template in its own file.
std::string read_chat_template_file(const std::string& dir) {
  std::ifstream f(std::filesystem::path(dir) / "chat_template.jinja", std::ios::binary);
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

struct Tokenizer::Impl {
  bool nfc = false;
  std::vector<SplitRegex> splits;
  std::unique_ptr<Bpe> bpe;
  AddedMatcher raw_added;           // matched on the text as given
  AddedMatcher norm_added;          // "normalized": true, matched after normalisation
  std::vector<std::string> bytes;   // per id: the bytes it decodes to
  std::vector<uint8_t> special;     // per id: 1 for special added tokens
  std::vector<uint8_t> added_flag;  // per id: 1 for added tokens, special or not
  StringMap<int32_t> ids;           // token as written in tokenizer.json -> id
  std::string chat_template, eos;
  std::unique_ptr<SegmentCache> segments;  // cache_segments()

  void load_normalizer(const json& n);
  void load_pre_tokenizer(const json& p);
  void load_model(const json& m);
  void load_added(const json& added);
  // Makes room in the per-id tables for id.
  void grow(int32_t id) {
    if (size_t(id) >= bytes.size()) {
      const size_t n = size_t(id) + 1;
      bytes.resize(n), special.resize(n), added_flag.resize(n);
    }
  }
  // Pre-tokenizes with splits[split...] and encodes each piece.
  void encode_plain(std::string_view text, std::vector<int32_t>& out, size_t split = 0) const;
};

void Tokenizer::Impl::load_normalizer(const json& n) {
  if (n.is_null()) return;
  std::string type = type_of(n);
  if (type == "NFC") {
    nfc = true;
  } else if (type == "Sequence" && member(n, "normalizers").is_array()) {
    for (const json& item : n["normalizers"]) load_normalizer(item);
  } else {
    fail("tokenizer.json: normalizer '{}' is not supported (tern supports NFC or none)", type);
  }
}

void Tokenizer::Impl::load_pre_tokenizer(const json& p) {
  std::vector<json> steps;
  if (type_of(p) == "Sequence" && member(p, "pretokenizers").is_array())
    steps.assign(p["pretokenizers"].begin(), p["pretokenizers"].end());
  else if (!p.is_null())
    steps.push_back(p);
  if (steps.empty() || type_of(steps.back()) != "ByteLevel")
    fail(
        "tokenizer.json: the pre_tokenizer must end with ByteLevel (tern supports Split... + "
        "ByteLevel)");
  const json& bl = steps.back();
  if (flag(bl, "add_prefix_space") || flag(bl, "use_regex"))
    fail(
        "tokenizer.json: ByteLevel pre_tokenizer with add_prefix_space or use_regex is not "
        "supported");
  steps.pop_back();
  for (const json& s : steps) {
    if (type_of(s) != "Split")
      fail("tokenizer.json: pre_tokenizer '{}' is not supported (tern supports Split, ByteLevel)",
           type_of(s));
    if (member(s, "behavior") != "Isolated" || flag(s, "invert"))
      fail("tokenizer.json: Split pre_tokenizer must have behavior Isolated and invert false");
    const json& pat = member(s, "pattern");
    if (member(pat, "Regex").is_string())
      splits.emplace_back(pat["Regex"].get<std::string>(), false);
    else if (member(pat, "String").is_string())
      splits.emplace_back(pat["String"].get<std::string>(), true);
    else
      fail("tokenizer.json: Split pattern must be {{\"Regex\": ...}} or {{\"String\": ...}}");
  }
}

void Tokenizer::Impl::load_model(const json& m) {
  if (type_of(m) != "BPE")
    fail("tokenizer.json: model '{}' is not supported (tern supports BPE)", type_of(m));
  if (!member(m, "dropout").is_null()) fail("tokenizer.json: BPE dropout is not supported");
  if (!empty_string_or_null(member(m, "continuing_subword_prefix")) ||
      !empty_string_or_null(member(m, "end_of_word_suffix")))
    fail("tokenizer.json: BPE continuing_subword_prefix / end_of_word_suffix are not supported");
  const json& vocab = member(m, "vocab");
  if (!vocab.is_object()) fail("tokenizer.json: model.vocab must be an object");
  StringMap<int32_t> by_bytes;
  by_bytes.reserve(vocab.size());
  ids.reserve(vocab.size());
  for (const auto& [text, id_json] : vocab.items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
        id_json.get<int64_t>() > INT32_MAX)
      fail("tokenizer.json: vocab entry '{}' has no valid id", text);
    auto id = id_json.get<int32_t>();
    auto b = byte_level_decode(text);
    grow(id);
    // As the ByteLevel decoder: text outside the byte alphabet stands for itself.
    bytes[size_t(id)] = b.value_or(text);
    ids[text] = id;
    if (b) by_bytes.emplace(std::move(*b), id);
  }
  const json& merges = member(m, "merges");
  if (!merges.is_array()) fail("tokenizer.json: model.merges must be an array");
  std::vector<std::pair<std::string, std::string>> pairs;
  pairs.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& mg = merges[i];
    std::string a, b;
    if (mg.is_string()) {
      const auto& s = mg.get_ref<const std::string&>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        fail("tokenizer.json: merge #{} '{}' is not two tokens separated by a space", i, s);
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
      a = mg[0].get<std::string>(), b = mg[1].get<std::string>();
    } else {
      fail("tokenizer.json: merge #{} must be \"a b\" or [\"a\", \"b\"]", i);
    }
    auto da = byte_level_decode(a), db = byte_level_decode(b);
    if (!da || !db)
      fail("tokenizer.json: merge #{} has a token outside the byte-level alphabet", i);
    pairs.emplace_back(std::move(*da), std::move(*db));
  }
  bpe = std::make_unique<Bpe>(std::move(by_bytes), pairs, flag(m, "ignore_merges"));
}

void Tokenizer::Impl::load_added(const json& added) {
  if (added.is_null()) return;
  if (!added.is_array()) fail("tokenizer.json: added_tokens must be an array");
  for (const json& t : added) {
    const json& content = member(t, "content");
    const json& id_json = member(t, "id");
    if (!content.is_string() || content.get_ref<const std::string&>().empty() ||
        !id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
        id_json.get<int64_t>() > INT32_MAX)
      fail("tokenizer.json: an added token needs a non-empty 'content' and an 'id'");
    const auto& text = content.get_ref<const std::string&>();
    if (utf8::find_invalid(text) != std::string::npos)
      fail("tokenizer.json: added token is not UTF-8");
    if (flag(t, "lstrip") || flag(t, "rstrip") || flag(t, "single_word"))
      fail("tokenizer.json: added token '{}': lstrip/rstrip/single_word are not supported", text);
    auto id = id_json.get<int32_t>();
    grow(id);
    bytes[size_t(id)] = byte_level_decode(text).value_or(text);
    special[size_t(id)] = flag(t, "special");
    added_flag[size_t(id)] = 1;
    ids[text] = id;
    // Hugging Face's default for "normalized" is !special.
    bool normalized =
        member(t, "normalized").is_boolean() ? t["normalized"].get<bool>() : !special[size_t(id)];
    if (normalized && nfc)
      norm_added.add(tern::nfc(text), id);
    else
      raw_added.add(text, id);
  }
}

void Tokenizer::Impl::encode_plain(std::string_view text, std::vector<int32_t>& out,
                                   size_t split) const {
  if (split == splits.size()) {
    if (!text.empty()) bpe->encode(text, out);
    return;
  }
  splits[split].split(text, [&](std::string_view piece) { encode_plain(piece, out, split + 1); });
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json(const json& tok, const json& config) {
  auto impl = std::make_unique<Impl>();
  try {
    if (!tok.is_object()) fail("tokenizer.json: not a JSON object");
    if (!member(tok, "truncation").is_null() || !member(tok, "padding").is_null())
      fail("tokenizer.json: truncation and padding are not supported");
    impl->load_normalizer(member(tok, "normalizer"));
    impl->load_pre_tokenizer(member(tok, "pre_tokenizer"));
    impl->load_model(member(tok, "model"));
    impl->load_added(member(tok, "added_tokens"));
    if (type_of(member(tok, "decoder")) != "ByteLevel")
      fail("tokenizer.json: decoder '{}' is not supported (tern supports ByteLevel)",
           type_of(member(tok, "decoder")));
    const json& post = member(tok, "post_processor");
    if (!post.is_null() && type_of(post) != "ByteLevel")
      fail("tokenizer.json: post_processor '{}' is not supported (tern supports ByteLevel or none)",
           type_of(post));
    impl->chat_template = chat_template_from_config(config);
    if (config.is_object()) {
      const json& eos = member(config, "eos_token");
      if (eos.is_string()) impl->eos = eos.get<std::string>();
      if (member(eos, "content").is_string()) impl->eos = eos["content"].get<std::string>();
    }
  } catch (const json::exception& e) {
    fail("tokenizer.json: unexpected content: {}", e.what());
  }
  return Tokenizer(std::move(impl));
}

std::string read_chat_template_source(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::path config = fs::path(dir) / "tokenizer_config.json";
  if (fs::exists(config)) {
    std::string tpl = chat_template_from_config(read_json_file(config.string()));
    if (!tpl.empty()) return tpl;
  }
  return read_chat_template_file(dir);
}

Tokenizer Tokenizer::load(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::path tok = fs::path(dir) / "tokenizer.json";
  if (!fs::exists(tok)) fail("{}: no tokenizer.json in this folder", dir);
  fs::path config = fs::path(dir) / "tokenizer_config.json";
  json cfg = fs::exists(config) ? read_json_file(config.string()) : json::object();
  Tokenizer t = from_json(read_json_file(tok.string()), cfg);
  if (t.impl_->chat_template.empty()) t.impl_->chat_template = read_chat_template_file(dir);
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  if (size_t bad = utf8::find_invalid(text); bad != std::string_view::npos)
    fail("cannot encode text that is not valid UTF-8 (byte 0x{:02x} at offset {})",
         uint8_t(text[bad]), bad);
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  auto push = [&](int32_t id) { out.push_back(id); };
  // A segment between added tokens encodes on its own (pure function of its text).
  auto encode_segment = [&](std::string_view seg, std::vector<int32_t>& ids) {
    if (!impl_->nfc) return impl_->encode_plain(seg, ids);
    std::string normed = nfc(seg);
    impl_->norm_added.split(
        normed, [&](std::string_view s) { impl_->encode_plain(s, ids); },
        [&](int32_t id) { ids.push_back(id); });
  };
  impl_->raw_added.split(
      text,
      [&](std::string_view seg) {
        if (impl_->segments && seg.size() >= SegmentCache::kMinBytes)
          impl_->segments->encode(seg, out, encode_segment);
        else
          encode_segment(seg, out);
      },
      push);
  return out;
}

void Tokenizer::cache_segments(size_t budget_bytes) {
  impl_->segments = std::make_unique<SegmentCache>(budget_bytes);
}

size_t Tokenizer::segment_cache_bytes() const {
  return impl_->segments ? impl_->segments->bytes() : 0;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string raw;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    raw += token_bytes(id);
  }
  std::string out;
  utf8::append_lossy(out, raw, true);
  return out;
}

int Tokenizer::vocab_size() const {
  return int(impl_->bytes.size());
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  auto it = impl_->ids.find(token);
  if (it == impl_->ids.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && size_t(id) < impl_->special.size() && impl_->special[size_t(id)] != 0;
}

bool Tokenizer::is_added(int32_t id) const {
  return id >= 0 && size_t(id) < impl_->added_flag.size() && impl_->added_flag[size_t(id)] != 0;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || size_t(id) >= impl_->bytes.size()) return {};
  return impl_->bytes[size_t(id)];
}

const std::string& Tokenizer::chat_template_source() const {
  return impl_->chat_template;
}
const std::string& Tokenizer::eos_token() const {
  return impl_->eos;
}

}  // namespace tern
