// Each `tern` subcommand registers itself on the CLI11 app; main() runs the one chosen.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace tern::cli {

// A registered command returns the process exit code when run.
using Runner = std::function<int()>;

Runner add_make_dummy(CLI::App& app);
Runner add_convert(CLI::App& app);
Runner add_score(CLI::App& app);
Runner add_run(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_render_chat(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_serve(CLI::App& app);
Runner add_chat(CLI::App& app);
Runner add_cache(CLI::App& app);

}  // namespace tern::cli
