// Encoding and decoding against the Qwen3 fixtures, the Qwen3.5 variant of
// the pipeline, and bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/error.h"
#include "core/json_file.h"
#include "test_util.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tern {
namespace {

using json = nlohmann::json;
using test::qwen3;

constexpr const char* kQwen35Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

// llama.cpp's format: texts separated by "\n__ggml_vocab_test__\n", ids one line per text.
std::vector<VocabCase> read_vocab_tests(const std::string& dir) {
  std::string inp = test::read_file(test::data(dir + "/vocab-tests.inp"));
  std::ifstream out = test::open_file(test::data(dir + "/vocab-tests.out"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<VocabCase> cases;
  for (size_t pos = 0, next; (next = inp.find(sep, pos)) != std::string::npos;
       pos = next + sep.size()) {
    VocabCase c{inp.substr(pos, next - pos), {}};
    std::string line;
    std::getline(out, line);
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  return cases;
}

// The Qwen3 tokenizer.json changed to Qwen3.5's pipeline: no NFC and the split
// regex with \p{M} (docs/model.md §Tokenizer).
json qwen35_variant() {
  json tok = read_json_file(std::string(TERN_QWEN3_TOKENIZER) + "/tokenizer.json");
  tok["normalizer"] = nullptr;
  tok["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = kQwen35Regex;
  return tok;
}

TEST(Tokenizer, Qwen3VocabTests) {
  auto cases = read_vocab_tests("tokenizer/qwen3");
  ASSERT_EQ(cases.size(), 46u);
  for (const auto& c : cases) EXPECT_EQ(qwen3().encode(c.text), c.ids) << "text: " << c.text;
}

TEST(Tokenizer, Qwen3Cases) {
  auto lines = test::read_lines(test::data("tokenizer/qwen3/cases.jsonl"));
  ASSERT_EQ(lines.size(), 62u);
  for (const auto& line : lines) {
    json c = json::parse(line);
    auto text = c["text"].get<std::string>();
    EXPECT_EQ(qwen3().encode(text), c["ids"].get<std::vector<int32_t>>()) << "text: " << text;
    EXPECT_EQ(qwen3().decode(c["ids"].get<std::vector<int32_t>>()), nfc(text));
  }
}

TEST(Tokenizer, Qwen35PipelineFromTheFile) {
  Tokenizer tok = Tokenizer::from_json(qwen35_variant());
  auto cases = read_vocab_tests("tokenizer/qwen3.5");
  ASSERT_EQ(cases.size(), 50u);
  for (const auto& c : cases) EXPECT_EQ(tok.encode(c.text), c.ids) << "text: " << c.text;
  // docs/model.md §Tokenizer: without NFC a decomposed é stays two pieces of bytes.
  EXPECT_EQ(tok.encode("e\xCC\x81"), (std::vector<int32_t>{68, 53839}));
  EXPECT_EQ(qwen3().encode("e\xCC\x81"), (std::vector<int32_t>{963}));
}

TEST(Tokenizer, SpecVectors) {
  const std::vector<std::pair<std::string, std::vector<int32_t>>> v = {
      {"Hello world", {9707, 1879}},
      {" Hello world", {21927, 1879}},
      {"Hello, world!", {9707, 11, 1879, 0}},
      {"   Hello", {256, 21927}},
      {"    Hello\n    Hello", {262, 21927, 198, 262, 21927}},
      {"\n\n\n", {1406}},
      {"333333333", std::vector<int32_t>(9, 18)},
      {"!!!!!!", {17085, 2928}},
      {" discards", {2560, 2347}},
  };
  for (const auto& [text, ids] : v) EXPECT_EQ(qwen3().encode(text), ids) << text;
}

TEST(Tokenizer, AddedTokensAreMatchedBeforeSplitting) {
  const Tokenizer& t = qwen3();
  ASSERT_EQ(t.vocab_size(), 151669);
  int32_t im_end = *t.token_id("<|im_end|>"), think = *t.token_id("<think>");
  EXPECT_EQ(im_end, 151645);
  EXPECT_TRUE(t.is_special(im_end));
  EXPECT_FALSE(t.is_special(think));
  EXPECT_EQ(t.token_id("Ġthe"), t.encode(" the")[0]);
  EXPECT_FALSE(t.token_id("no such token"));
  // docs/model.md §Tokenizer: "X.<|im_end|>" is three tokens, not seven.
  auto ids = t.encode("X.<|im_end|>");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[2], im_end);
  EXPECT_EQ(t.encode("<think></think>"), (std::vector<int32_t>{think, think + 1}));
  EXPECT_EQ(t.decode(t.encode("a<|im_end|>b")), "a<|im_end|>b");
  EXPECT_EQ(t.decode(t.encode("a<|im_end|>b"), true), "ab");
}

TEST(Tokenizer, DecodeRoundTripsAndReplacesBrokenUtf8) {
  const Tokenizer& t = qwen3();
  std::string text = "Grüße, 世界! 👋🏽 e\u0301 \t\n end";
  EXPECT_EQ(t.decode(t.encode(text)), nfc(text));
  // The single-byte tokens of "世" (E4 B8 96), cut after two bytes.
  auto id = [&](uint8_t b) {
    std::string s;
    utf8::append(s, byte_level_char(b));
    return *t.token_id(s);
  };
  std::vector<int32_t> cut = {id(0xE4), id(0xB8), id('a')};
  EXPECT_EQ(t.decode(cut),
            "\xEF\xBF\xBD"
            "a");
  std::vector<int32_t> lone = {id(0xFF), id(0x80)};
  EXPECT_EQ(t.decode(lone), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Tokenizer, UnknownIdsDecodeToNothing) {
  const Tokenizer& t = qwen3();
  std::vector<int32_t> ids = {9707, -1, 151669, 1 << 30, 1879};
  EXPECT_EQ(t.decode(ids), "Hello world");
  EXPECT_EQ(t.token_bytes(-5), "");
  EXPECT_FALSE(t.is_special(1 << 30));
}

TEST(Tokenizer, InvalidUtf8IsAnError) {
  for (std::string bad : {"abc\xFF", "\xC3", "\xED\xA0\x80", "ok\xE4\xB8"}) {
    EXPECT_THROW(qwen3().encode(bad), Error) << bad;
  }
  EXPECT_TRUE(qwen3().encode("").empty());
}

TEST(Tokenizer, LongPiecesRoundTrip) {
  // Linear-time paths (see bench/): one huge regex match, one huge BPE piece.
  const Tokenizer& t = qwen3();
  for (std::string text :
       {std::string(200000, 'a'), std::string(200000, ' '), std::string(100000, '\n'),
        std::string(50000, '7'), std::string(60000, 'x') + " " + std::string(60000, ' ') + "y"}) {
    auto ids = t.encode(text);
    EXPECT_EQ(t.decode(ids), text);
    EXPECT_LE(ids.size(), text.size());
  }
}

TEST(Tokenizer, ChatTemplateAndEosFromConfig) {
  EXPECT_EQ(qwen3().eos_token(), "<|im_end|>");
  EXPECT_EQ(qwen3().chat_template_source(),
            test::read_file(test::data("chat-template/qwen3.jinja")));
}

TEST(OnigToPcre2, WhitespaceFollowsOniguruma) {
  std::string p = onig_to_pcre2(R"(\s+(?!\S)|[^\s\p{L}])");
  EXPECT_EQ(p.find("\\s"), std::string::npos);
  EXPECT_EQ(p.find("\\S"), std::string::npos);
  SplitRegex re(R"(\s+)", false);
  std::vector<std::string_view> pieces;
  // U+180E is not White_Space (PCRE2's \s would take it); U+0085 is.
  re.split(
      "a\xE1\xA0\x8E"
      "b\xC2\x85"
      "c",
      [&](std::string_view piece) { pieces.push_back(piece); });
  EXPECT_EQ(pieces, (std::vector<std::string_view>{"a\xE1\xA0\x8E"
                                                   "b",
                                                   "\xC2\x85", "c"}));
  for (const char* bad : {R"(\w+)", R"(\bx)", R"([a[b]])", R"([\S])", R"([a&&b])"})
    EXPECT_THROW(onig_to_pcre2(bad), Error) << bad;
}

// A small byte-level tokenizer.json for the loader's checks.
json tiny() {
  json vocab = json::object();
  auto bl = [](std::string_view bytes) {
    std::string s;
    for (char c : bytes) utf8::append(s, byte_level_char(uint8_t(c)));
    return s;
  };
  for (int b = 0; b < 256; ++b) vocab[bl(std::string(1, char(b)))] = b;
  vocab["ab"] = 256;
  vocab["bc"] = 257;
  vocab[bl(" a")] = 258;
  return json{
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", " ?\\p{L}+|\\s+"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", {"b c", json::array({"a", "b"}), bl(" ") + " a"}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens",
       {{{"id", 300}, {"content", "<x>"}, {"special", true}, {"normalized", false}},
        {{"id", 301}, {"content", "<xy>"}, {"special", false}, {"normalized", false}}}},
  };
}

TEST(Tokenizer, TinyMergesByRankAndAddedTokensLongestFirst) {
  Tokenizer t = Tokenizer::from_json(tiny());
  EXPECT_EQ(t.vocab_size(), 302);
  // "abc": "b c" has the better rank, so "a"+"bc", not "ab"+"c".
  EXPECT_EQ(t.encode("abc"), (std::vector<int32_t>{'a', 257}));
  EXPECT_EQ(t.encode("abab a"), (std::vector<int32_t>{256, 256, 258}));
  EXPECT_EQ(t.encode("<xy><x>!"), (std::vector<int32_t>{301, 300, '!'}));
  // Text the regex does not match still becomes pieces of its own.
  EXPECT_EQ(t.encode("1"), (std::vector<int32_t>{'1'}));
}

TEST(Tokenizer, UnsupportedOrMalformedFilesAreErrors) {
  auto expect_error = [](const json& tok, const std::string& needle) {
    try {
      Tokenizer::from_json(tok);
      ADD_FAILURE() << "no error; expected one mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  json t = tiny();
  t["normalizer"] = {{"type", "NFKC"}};
  expect_error(t, "NFKC");
  t = tiny();
  t["model"]["type"] = "WordPiece";
  expect_error(t, "WordPiece");
  t = tiny();
  t.erase("model");
  expect_error(t, "model");
  t = tiny();
  t["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  expect_error(t, "Isolated");
  t = tiny();
  t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  expect_error(t, "does not compile");
  t = tiny();
  t["pre_tokenizer"]["pretokenizers"][0]["type"] = "Whitespace";
  expect_error(t, "Whitespace");
  t = tiny();
  t["model"]["merges"].push_back("q zz");
  expect_error(t, "merge #3");
  t = tiny();
  t["model"]["merges"].push_back("a b c");
  expect_error(t, "merge #3");
  t = tiny();
  t["model"]["vocab"].erase("a");
  expect_error(t, "byte 0x61");
  t = tiny();
  t["model"]["vocab"]["zz"] = "seven";
  expect_error(t, "zz");
  t = tiny();
  t["added_tokens"][0]["lstrip"] = true;
  expect_error(t, "lstrip");
  t = tiny();
  t["added_tokens"][1]["content"] = "";
  expect_error(t, "non-empty");
  t = tiny();
  t["decoder"] = nullptr;
  expect_error(t, "decoder");
  t = tiny();
  t["post_processor"] = {{"type", "TemplateProcessing"}};
  expect_error(t, "TemplateProcessing");
  t = tiny();
  t["truncation"] = {{"max_length", 5}};
  expect_error(t, "truncation");
  expect_error(json::array(), "not a JSON object");
}

TEST(Tokenizer, LoadErrorsNameTheFile) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("tern_tok_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  EXPECT_THROW(Tokenizer::load(dir.string()), Error);
  std::ofstream(dir / "tokenizer.json") << "{\"model\": ";
  try {
    Tokenizer::load(dir.string());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json: invalid JSON"), std::string::npos)
        << e.what();
  }
  std::ofstream(dir / "tokenizer.json") << tiny().dump();
  std::ofstream(dir / "chat_template.jinja") << "{{ messages }}";
  EXPECT_EQ(Tokenizer::load(dir.string()).chat_template_source(), "{{ messages }}");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tern

namespace tern::test {
namespace {

// The segment cache changes no id: random long texts (words, digits,
// punctuation, non-ASCII, newlines) with added tokens between them, encoded
// by a cached tokenizer twice (miss, then hit) and by the plain one; a small
// budget keeps the cache within it.
TEST(Tokenizer, SegmentCacheGivesTheSameIds) {
  Tokenizer cached = Tokenizer::load(TERN_QWEN3_TOKENIZER);
  const size_t budget = 64 << 10;
  cached.cache_segments(budget);
  const char* words[] = {"the ", "river", " 1234",  ", ",    "ünïcödé ",
                         "\n\n", "  x",   "日本語", "don't", "🙂"};
  const char* added[] = {"<|im_start|>", "<|im_end|>\n", "<think>"};
  std::mt19937 g(17);
  for (int doc = 0; doc < 40; ++doc) {
    std::string text;
    const int n = 50 + int(g() % 2000);
    for (int i = 0; i < n; ++i)
      text += g() % 100 == 0 ? added[g() % std::size(added)] : words[g() % std::size(words)];
    const std::vector<int32_t> want = qwen3().encode(text);
    EXPECT_EQ(cached.encode(text), want) << "first, document " << doc;
    EXPECT_EQ(cached.encode(text), want) << "again, document " << doc;
    EXPECT_LE(cached.segment_cache_bytes(), budget);
  }
  EXPECT_GT(cached.segment_cache_bytes(), 0u);
}

}  // namespace
}  // namespace tern::test
