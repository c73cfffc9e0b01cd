// `tern tokenize` and `tern render-chat`: output format, and errors that name
// the input line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "test_util.h"

namespace tern {
namespace {

struct Result {
  int status;
  std::string out, err;
};

// Runs `tern ARGS` with `input` written to a temporary JSONL file passed as --jsonl.
Result run_tern(const std::string& args, const std::string& input) {
  namespace fs = std::filesystem;
  std::string base =
      (fs::temp_directory_path() / ("tern_cli_" + std::to_string(::getpid()))).string();
  std::ofstream(base + ".jsonl", std::ios::binary) << input;
  std::string cmd = std::string(TERN_BINARY) + " " + args + " --jsonl " + base + ".jsonl >" + base +
                    ".out 2>" + base + ".err";
  int status = std::system(cmd.c_str());
  Result r{WEXITSTATUS(status), test::read_file(base + ".out"), test::read_file(base + ".err")};
  for (const char* ext : {".jsonl", ".out", ".err"}) fs::remove(base + ext);
  return r;
}

const std::string kTok = "--tokenizer " + std::string(TERN_QWEN3_TOKENIZER);

TEST(Cli, TokenizePrintsIdsPerLine) {
  Result r = run_tern("tokenize " + kTok,
                      "{\"text\": \"Hello world\"}\n\n{\"text\": \"<|im_start|>hi<|im_end|>\"}\n");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "{\"ids\":[9707,1879]}\n{\"ids\":[151644,6023,151645]}\n");
}

TEST(Cli, TokenizeErrorsNameTheLine) {
  Result r = run_tern("tokenize " + kTok, "{\"text\": \"a\"}\n{\"text\": 5}\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(".jsonl:2: expected {\"text\": \"...\"}"), std::string::npos) << r.err;
  r = run_tern("tokenize " + kTok, "{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"text\": \n");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(".jsonl:3: malformed JSON"), std::string::npos) << r.err;
  r = run_tern("tokenize " + kTok, "{\"text\": \"bad \xFF byte\"}\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(".jsonl:1: malformed JSON"), std::string::npos) << r.err;
  r = run_tern("tokenize " + kTok, "[1, 2]\n");
  EXPECT_NE(r.err.find(".jsonl:1: expected a JSON object"), std::string::npos) << r.err;
  r = run_tern("tokenize --tokenizer /nonexistent", "{\"text\": \"a\"}\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("/nonexistent: no tokenizer.json"), std::string::npos) << r.err;
}

TEST(Cli, RenderChatTextOrError) {
  Result r = run_tern("render-chat " + kTok,
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], "
                      "\"add_generation_prompt\": true, "
                      "\"enable_thinking\": false}\n"
                      "{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\"}]}\n");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out,
            "{\"text\":\"<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</"
            "think>\\n\\n\"}\n"
            "{\"error\":\"No user query found in messages.\"}\n");
  // The Qwen3 fixture carries the Qwen3 template: tern warns and renders Qwen3.5's.
  EXPECT_NE(r.err.find("not the Qwen3.5 one"), std::string::npos) << r.err;
  r = run_tern("render-chat " + kTok, "{\"messages\": [}\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(".jsonl:1: malformed JSON"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tern
