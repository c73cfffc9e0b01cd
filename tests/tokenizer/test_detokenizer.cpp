// The streaming detokenizer: whole characters only, and the pieces add up to
// exactly the full decode, whatever the ids.
#include <gtest/gtest.h>

#include <random>

#include "test_util.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/utf8.h"

namespace tern {
namespace {

using test::qwen3;

int32_t byte_token(uint8_t b) {
  std::string s;
  utf8::append(s, byte_level_char(b));
  return *qwen3().token_id(s);
}

// Streams ids one by one; checks every piece is valid UTF-8 and the total.
void expect_stream_matches_decode(const std::vector<int32_t>& ids, bool skip_special = false) {
  StreamDecoder dec(qwen3(), skip_special);
  std::string streamed;
  for (int32_t id : ids) {
    std::string piece = dec.push(id);
    EXPECT_EQ(utf8::find_invalid(piece), std::string::npos);
    streamed += piece;
  }
  streamed += dec.finish();
  EXPECT_EQ(streamed, qwen3().decode(ids, skip_special));
}

const char* kSamples[] = {
    "Grüße aus Köln — naïve café",
    "世界你好，今天天气很好。",
    "こんにちは、世界！カタカナ",
    "안녕하세요 세계",
    "Привет, мир! Ελληνικά",
    "مرحبا بالعالم שלום עולם",
    "नमस्ते दुनिया ภาษาไทย",
    "👋🏽 👨‍👩‍👧‍👦 🇫🇷 🏳️‍🌈 ∑∫√∞",
};

TEST(StreamDecoder, RealTokensOfMultiByteText) {
  for (const char* s : kSamples) {
    auto ids = qwen3().encode(s);
    expect_stream_matches_decode(ids);
  }
}

TEST(StreamDecoder, RandomByteSplitsOfMultiByteText) {
  // The text's bytes as single-byte tokens mixed with whole tokens of random
  // spans, so that characters are cut at every possible place.
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::string text = kSamples[rng() % std::size(kSamples)];
    std::vector<int32_t> ids;
    for (size_t i = 0; i < text.size();) {
      size_t n = std::min<size_t>(1 + rng() % 4, text.size() - i);
      if (rng() % 2 == 0) {
        for (size_t k = 0; k < n; ++k) ids.push_back(byte_token(uint8_t(text[i + k])));
      } else {
        // The whole tokens of a span: only when the span is valid UTF-8 by itself.
        std::string span = text.substr(i, n);
        if (utf8::find_invalid(span) == std::string::npos)
          for (int32_t id : qwen3().encode(span)) ids.push_back(id);
        else
          for (char c : span) ids.push_back(byte_token(uint8_t(c)));
      }
      i += n;
    }
    EXPECT_EQ(qwen3().decode(ids), text);
    expect_stream_matches_decode(ids);
  }
}

TEST(StreamDecoder, ArbitraryIdsIncludingBrokenUtf8AndSpecials) {
  std::mt19937 rng(11);
  for (int round = 0; round < 300; ++round) {
    std::vector<int32_t> ids;
    for (int k = 0; k < 12; ++k) {
      switch (rng() % 4) {
        case 0:
          ids.push_back(byte_token(uint8_t(0x80 + rng() % 0x80)));
          break;  // stray or lead byte
        case 1:
          ids.push_back(int32_t(rng() % 151669));
          break;
        case 2:
          ids.push_back(151643 + int32_t(rng() % 26));
          break;  // added tokens
        default:
          ids.push_back(-1 - int32_t(rng() % 3));
          break;  // unknown
      }
    }
    expect_stream_matches_decode(ids, false);
    expect_stream_matches_decode(ids, true);
  }
}

TEST(StreamDecoder, HoldsAnIncompleteCharacter) {
  StreamDecoder dec(qwen3());
  EXPECT_EQ(dec.push(byte_token(0xE4)), "");
  EXPECT_EQ(dec.push(byte_token(0xB8)), "");
  EXPECT_EQ(dec.push(byte_token(0x96)), "世");
  EXPECT_EQ(dec.push(byte_token(0xF0)), "");
  EXPECT_EQ(dec.finish(), "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace tern
