// tern chat: an interactive, streaming, multi-turn conversation on the
// engine, reusing each turn's state (the session cache). Reasoning is shown
// dimmed; /reset, /system TEXT, /think on|off, /exit; Ctrl-C stops the
// current answer (not the program), Ctrl-D ends the chat. While the user
// types, the last answer is prefilled as the next turn will send it back.
// With --cache-dir or --cache-disk, sessions are kept on disk too.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>

#include "chat/next_turn.h"
#include "chat/prompt.h"
#include "checkpoint/fingerprint.h"
#include "cli/cache_options.h"
#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/sizes.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/scheduler.h"

namespace tern::cli {

namespace {

struct ChatOptions {
  ModelOptions model;
  SamplingParams sampling = [] {
    SamplingParams p;  // Qwen3's suggested settings for chat
    p.temperature = 0.7f;
    p.top_p = 0.8f;
    p.top_k = 20;
    return p;
  }();
  int max_tokens = 4096;
  std::string system;
  bool no_thinking = false;
  std::string cache_mem = "2G";
  DiskCacheFlags disk;
  bool idle_prefill = true;
};

std::shared_ptr<std::atomic<bool>> g_stop;  // the answer being generated

// One turn on the engine thread (the Scheduler's, as in the server), its
// deltas shown as they come.
Result run_turn(Scheduler& sched, Request r, const std::function<void(const Delta&)>& show) {
  auto job = sched.submit(std::move(r));
  if (!job) fail("the engine's queue is full");  // one turn at a time: never
  for (;;) {
    auto e = job->next(std::chrono::milliseconds(50));
    if (!e) continue;
    if (e->delta) {
      show(*e->delta);
      continue;
    }
    if (!e->error.empty()) throw Error(e->error);
    return *e->result;
  }
}

void on_sigint(int) {
  if (auto s = g_stop) s->store(true);
}

int chat(const ChatOptions& o) {
  validate(o.sampling);
  if (!std::filesystem::exists(std::filesystem::path(o.model.model) / "tokenizer.json"))
    fail("{} has no tokenizer.json", o.model.model);
  const Tokenizer tok = Tokenizer::load(o.model.model);
  auto backend = open_backend(o.model);
  EngineOptions eo;
  eo.cache_bytes = parse_size(o.cache_mem, "--cache-mem");
  apply_disk_cache(
      o.disk, [&] { return model_fingerprint(o.model.model) + " weights=" + o.model.weights; }, eo);
  Engine engine(*backend, &tok, eo);
  Scheduler sched(engine, 1);
  const bool tty = isatty(STDOUT_FILENO) == 1;
  const char* dim = tty ? "\x1b[2m" : "";
  const char* plain = tty ? "\x1b[0m" : "";
  struct sigaction sa = {};
  sa.sa_handler = on_sigint;  // no SA_RESTART: a Ctrl-C at the prompt clears the line
  sigaction(SIGINT, &sa, nullptr);

  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  std::string system = o.system;
  bool thinking = !o.no_thinking;
  std::fprintf(stderr,
               "tern chat: /reset, /system TEXT, /think on|off, /exit; Ctrl-C stops an answer\n");
  uint64_t turn = 0;
  for (;;) {
    std::fputs(tty ? "\x1b[1m> \x1b[0m" : "> ", stdout);
    std::fflush(stdout);
    std::string line;
    const bool got = bool(std::getline(std::cin, line));
    if (!got) {
      if (std::cin.eof()) break;
      std::cin.clear();  // interrupted
      std::fputc('\n', stdout);
      continue;
    }
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      messages = nlohmann::ordered_json::array();
      std::printf("%s(conversation cleared)%s\n", dim, plain);
      continue;
    }
    if (line.starts_with("/system")) {
      system = line.size() > 8 ? line.substr(8) : "";
      messages = nlohmann::ordered_json::array();
      std::printf("%s(system prompt set; conversation cleared)%s\n", dim, plain);
      continue;
    }
    if (line == "/think on" || line == "/think off") {
      thinking = line == "/think on";
      std::printf("%s(thinking %s)%s\n", dim, thinking ? "on" : "off", plain);
      continue;
    }
    if (line.starts_with("/")) {
      std::printf("%s(unknown command: /reset, /system TEXT, /think on|off, /exit)%s\n", dim,
                  plain);
      continue;
    }
    messages.push_back({{"role", "user"}, {"content", line}});
    nlohmann::ordered_json conversation = nlohmann::ordered_json::array();
    if (!system.empty()) conversation.push_back({{"role", "system"}, {"content", system}});
    for (const auto& m : messages) conversation.push_back(m);
    ChatPrompt prompt = render_prompt(tok, std::move(conversation), thinking);
    Request r;
    r.prompt = std::move(prompt.ids);
    r.sampling = o.sampling;
    r.sampling.seed = o.sampling.seed + turn++;
    r.max_tokens = o.max_tokens;
    r.in_reasoning = prompt.in_reasoning;
    r.cancelled = g_stop = std::make_shared<std::atomic<bool>>(false);
    std::string content, reasoning;
    bool in_dim = false;
    Result res;
    try {
      res = run_turn(sched, std::move(r), [&](const Delta& d) {
        if (!d.chat.reasoning.empty()) {
          if (!in_dim) std::fputs(dim, stdout);
          in_dim = true;
          std::fputs(d.chat.reasoning.c_str(), stdout);
          reasoning += d.chat.reasoning;
        }
        std::string text = d.chat.content;
        for (const ToolCall& c : d.chat.tool_calls)
          text += "[tool call " + c.name + " " + c.arguments_json() + "]";
        if (!text.empty()) {
          if (in_dim) std::printf("%s\n\n", plain);
          in_dim = false;
          std::fputs(text.c_str(), stdout);
          content += d.chat.content;
        }
        std::fflush(stdout);
      });
    } catch (const Error& e) {
      messages.erase(messages.size() - 1);
      std::printf("%s\n%s(%s)%s\n", plain, dim, e.what(), plain);
      continue;
    }
    g_stop.reset();
    std::printf("%s\n%s(%lld tokens, %.1f tok/s, %lld cached%s)%s\n", plain, dim,
                static_cast<long long>(res.completion_tokens), res.decode_tok_s(),
                static_cast<long long>(res.cached_tokens),
                res.finish == Finish::cancelled ? ", stopped" : "", plain);
    nlohmann::ordered_json answer = {{"role", "assistant"}, {"content", content}};
    if (!reasoning.empty()) answer["reasoning_content"] = reasoning;
    messages.push_back(answer);
    // While the user types, the engine prefills the next turn's start (exact
    // reuse holds: the very calls that turn would run; docs/serving.md, "Idle
    // prefill"); the next turn's submit cancels it where it got to.
    if (o.idle_prefill && engine.reuses()) {
      ParsedDelta said;
      said.content = content, said.reasoning = reasoning;
      if (auto next = next_turn_prefix(prompt.render, tok, said); !next.empty())
        sched.submit_background(prefill_only(std::move(next)));
    }
  }
  return 0;
}

}  // namespace

Runner add_chat(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat", "Interactive multi-turn chat in the terminal");
  auto o = std::make_shared<ChatOptions>();
  add_model_options(cmd, o->model);
  add_sampling_options(cmd, o->sampling);
  cmd->add_option("--max-tokens", o->max_tokens, "Tokens an answer may have")
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--system", o->system, "System prompt");
  cmd->add_flag("--no-thinking", o->no_thinking, "Start with thinking off (/think on turns it on)");
  cmd->add_option("--cache-mem", o->cache_mem, "Session cache budget, e.g. 2G (0: no reuse)");
  add_disk_cache_options(cmd, o->disk);
  cmd->add_flag("!--no-idle-prefill", o->idle_prefill,
                "Do not prefill the last answer as the next turn's history while you type");
  return [o] { return chat(*o); };
}

}  // namespace tern::cli
