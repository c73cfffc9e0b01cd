// tern: a Qwen3.6-35B-A3B inference engine. Dispatches to the subcommands.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "core/env.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"tern: an inference engine for Qwen3.6-35B-A3B"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every command");
  std::string env_help = "Environment:\n";
  for (const tern::EnvVar& v : tern::env_vars())
    env_help += fmt::format("  {:<18}{}\n", v.name, v.what);
  app.footer(env_help);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));

  std::map<CLI::App*, tern::cli::Runner> runners;
  auto add = [&](tern::cli::Runner (*reg)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    auto runner = reg(app);
    runners[app.get_subcommands({})[before]] = std::move(runner);
  };
  add(tern::cli::add_make_dummy);
  add(tern::cli::add_convert);
  add(tern::cli::add_score);
  add(tern::cli::add_run);
  add(tern::cli::add_tokenize);
  add(tern::cli::add_render_chat);
  add(tern::cli::add_bench);
  add(tern::cli::add_serve);
  add(tern::cli::add_chat);
  add(tern::cli::add_cache);

  CLI11_PARSE(app, argc, argv);
  spdlog::set_default_logger(spdlog::stderr_color_mt("tern"));
  spdlog::set_pattern("[%H:%M:%S.%e] %^%l%$ %v");
  spdlog::set_level(spdlog::level::from_str(log_level));
  try {
    for (auto& [sub, run] : runners)
      if (sub->parsed()) return run();
  } catch (const tern::Error& e) {
    std::fprintf(stderr, "tern: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tern: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
