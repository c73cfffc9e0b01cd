// `tern tokenize`: encodes the "text" of each JSON line, printing {"ids": [...]}.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/jsonl.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace tern::cli {

Runner add_tokenize(CLI::App& app) {
  struct Options {
    std::string dir, jsonl;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("tokenize",
                                 "Encode texts: each line {\"text\": ...} gives {\"ids\": [...]}");
  cmd->add_option("--tokenizer", opt->dir, "Folder with tokenizer.json and tokenizer_config.json")
      ->required();
  cmd->add_option("--jsonl", opt->jsonl, "Input JSON lines (- for stdin)")->required();
  return [opt] {
    Tokenizer tok = Tokenizer::load(opt->dir);
    for_each_jsonl(opt->jsonl, [&](const nlohmann::ordered_json& obj) {
      auto text = obj.find("text");
      if (text == obj.end() || !text->is_string()) fail("expected {{\"text\": \"...\"}}");
      std::vector<int32_t> ids = tok.encode(text->get_ref<const std::string&>());
      fmt::print("{{\"ids\":[{}]}}\n", fmt::join(ids, ","));
    });
    std::fflush(stdout);
    return 0;
  };
}

}  // namespace tern::cli
