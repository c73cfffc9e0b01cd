// tern make-dummy: a random-weight checkpoint of the real structure.
#include <spdlog/spdlog.h>

#include "checkpoint/dummy.h"
#include "cli/commands.h"

namespace tern::cli {

Runner add_make_dummy(CLI::App& app) {
  auto* cmd = app.add_subcommand("make-dummy", "Write a random-weight checkpoint");
  auto opt = std::make_shared<DummyOptions>();
  auto layout = std::make_shared<std::string>("mlx4");
  cmd->add_option("--preset", opt->preset, "Model shape: tiny, mid or 35b-a3b")
      ->check(CLI::IsMember({"tiny", "mid", "35b-a3b"}));
  cmd->add_option("--config", opt->config_file, "config.json to use instead of a preset");
  cmd->add_option("--layout", *layout, "hf (bf16) or mlx4 (4-bit)")
      ->check(CLI::IsMember({"hf", "mlx4"}));
  cmd->add_option("--seed", opt->seed, "Random seed");
  cmd->add_option("--out", opt->out_dir, "Output folder")->required();
  cmd->add_option("--tokenizer", opt->tokenizer_dir, "Folder with tokenizer.json to copy in");
  return [opt, layout] {
    opt->layout = layout_from_name(*layout);
    make_dummy(*opt);
    spdlog::info("wrote {}", opt->out_dir);
    return 0;
  };
}

}  // namespace tern::cli
