// Splits generated text into reasoning (inside <think>...</think>), content
// and tool calls, incrementally: text is released as soon as it cannot be the
// start of a tag, so a partial tag is never emitted as content.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_call.h"

namespace tern {

struct ParsedDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;

  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
  void append(ParsedDelta&& d);
};

class OutputParser {
 public:
  // `in_reasoning`: the prompt already opened <think> (see prompt_opens_reasoning).
  // `tools`: the request's tool list, which types the parameter values.
  // `tool_calls` false: <tool_call> blocks are text (the request allows none).
  // A call written inside the reasoning is still a call; the reasoning goes
  // on after it.
  explicit OutputParser(bool in_reasoning, const nlohmann::ordered_json& tools = nullptr,
                        bool tool_calls = true);

  // Feeds generated text; returns what became certain.
  ParsedDelta push(std::string_view text);
  // End of generation: releases what was held. A tool call left open, or one
  // that does not parse, comes out as content.
  ParsedDelta finish();

 private:
  enum class Mode { kStart, kReasoning, kContent, kToolCall };
  void process(bool final, ParsedDelta& out);
  void emit_reasoning(std::string_view s, ParsedDelta& out);
  void emit_content(std::string_view s, ParsedDelta& out);
  void emit_text(std::string_view s, ParsedDelta& out);

  ToolSchemas schemas_;
  bool tool_calls_;
  Mode mode_;
  bool call_in_reasoning_ = false;  // the open call began inside <think>
  std::string buf_;                 // text not yet classified
  std::string held_space_;          // content whitespace that waits for more content
  std::string space_before_call_;   // ... and the whitespace before a <tool_call>
  size_t call_scanned_ = 0;         // buf_ offset known to hold no </tool_call>
  bool reasoning_begun_ = false;    // leading newlines of the reasoning are dropped
  bool content_begun_ = false;      // ... and of the content
};

// Whether a rendered prompt leaves the model inside an open <think> block
// (the Qwen3.5 generation prompt with thinking on ends in "<think>\n").
bool prompt_opens_reasoning(std::string_view prompt);

// Parses a whole generated text at once.
ParsedDelta parse_output(std::string_view text, bool in_reasoning,
                         const nlohmann::ordered_json& tools = nullptr);

}  // namespace tern
