// `tern render-chat`: renders each JSON line's conversation with the Qwen3.5
// chat format, printing {"text": ...} or, when the template rejects it, {"error": ...}.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "chat/chat_template.h"
#include "cli/commands.h"
#include "cli/jsonl.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace tern::cli {

Runner add_render_chat(CLI::App& app) {
  struct Options {
    std::string dir, jsonl;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "render-chat",
      "Render conversations: each line {\"messages\": [...], ...} gives {\"text\": ...}");
  cmd->add_option("--tokenizer", opt->dir, "Folder with tokenizer.json and tokenizer_config.json")
      ->required();
  cmd->add_option("--jsonl", opt->jsonl, "Input JSON lines (- for stdin)")->required();
  return [opt] {
    if (!std::filesystem::is_directory(opt->dir)) fail("{}: not a folder", opt->dir);
    std::string source = read_chat_template_source(opt->dir);
    if (!source.empty() && !is_qwen35_chat_template(source))
      spdlog::warn(
          "{}: the checkpoint's chat template is not the Qwen3.5 one; tern renders the "
          "Qwen3.5 format regardless",
          opt->dir);
    for_each_jsonl(opt->jsonl, [](const nlohmann::ordered_json& request) {
      nlohmann::ordered_json out;
      try {
        out["text"] = render_chat(request);
      } catch (const ChatTemplateError& e) {
        out["error"] = e.what();
      }
      std::string line = out.dump(-1, ' ', false) + "\n";
      std::fwrite(line.data(), 1, line.size(), stdout);
    });
    std::fflush(stdout);
    return 0;
  };
}

}  // namespace tern::cli
