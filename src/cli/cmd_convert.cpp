// tern convert: Hugging Face bf16 checkpoint -> MLX-layout 4-bit checkpoint.
#include "checkpoint/convert.h"
#include "cli/commands.h"

namespace tern::cli {

Runner add_convert(CLI::App& app) {
  auto* cmd = app.add_subcommand("convert", "Convert a Hugging Face checkpoint to MLX 4-bit");
  auto in = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  cmd->add_option("--in", *in, "Hugging Face checkpoint folder")->required();
  cmd->add_option("--out", *out, "Output folder")->required();
  return [in, out] {
    convert_checkpoint(*in, *out);
    return 0;
  };
}

}  // namespace tern::cli
