#include "chat/output_parser.h"

#include <algorithm>

namespace tern {
namespace {

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>",
                           kCallOpen = "<tool_call>", kCallClose = "</tool_call>";

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// Length of the longest suffix of s that is a proper prefix of tag: text that
// must wait because it may turn out to be the tag.
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

void ParsedDelta::append(ParsedDelta&& d) {
  reasoning += d.reasoning;
  content += d.content;
  for (ToolCall& c : d.tool_calls) tool_calls.push_back(std::move(c));
}

OutputParser::OutputParser(bool in_reasoning, const nlohmann::ordered_json& tools, bool tool_calls)
    : schemas_(tools),
      tool_calls_(tool_calls),
      mode_(in_reasoning ? Mode::kReasoning : Mode::kStart) {}

ParsedDelta OutputParser::push(std::string_view text) {
  buf_ += text;
  ParsedDelta out;
  process(false, out);
  return out;
}

ParsedDelta OutputParser::finish() {
  ParsedDelta out;
  process(true, out);
  held_space_.clear();  // trailing whitespace of the content is dropped
  return out;
}

void OutputParser::emit_reasoning(std::string_view s, ParsedDelta& out) {
  if (!reasoning_begun_) {
    while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
    reasoning_begun_ = !s.empty();
  }
  out.reasoning += s;
}

void OutputParser::emit_content(std::string_view s, ParsedDelta& out) {
  if (!content_begun_) {
    while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
    content_begun_ = !s.empty();
  }
  // Whitespace is held until more content follows: before a tool call or at
  // the end it is dropped.
  auto last = std::find_if(s.rbegin(), s.rend(), [](char c) { return !is_space(c); });
  if (last == s.rend()) {
    held_space_ += s;
    return;
  }
  size_t keep = size_t(s.rend() - last);
  out.content += held_space_;
  out.content += s.substr(0, keep);
  held_space_ = s.substr(keep);
}

// A <tool_call> block that is not a call, back to the text it came from.
void OutputParser::emit_text(std::string_view s, ParsedDelta& out) {
  if (call_in_reasoning_) {
    emit_reasoning(s, out);
    mode_ = Mode::kReasoning;
    return;
  }
  held_space_ = std::move(space_before_call_);
  emit_content(s, out);
  mode_ = Mode::kContent;
}

void OutputParser::process(bool final, ParsedDelta& out) {
  for (;;) {
    switch (mode_) {
      case Mode::kStart: {  // the model may open <think> itself
        size_t lead = 0;
        while (lead < buf_.size() && is_space(buf_[lead])) ++lead;
        std::string_view rest = std::string_view(buf_).substr(lead);
        if (rest.starts_with(kThinkOpen)) {
          buf_.erase(0, lead + kThinkOpen.size());
          mode_ = Mode::kReasoning;
          continue;
        }
        if (!final && kThinkOpen.starts_with(rest)) return;  // undecided yet
        mode_ = Mode::kContent;
        continue;
      }
      case Mode::kReasoning: {
        size_t end = buf_.find(kThinkClose);
        const size_t call = tool_calls_ ? buf_.find(kCallOpen) : std::string::npos;
        if (call < end) {  // a call inside the reasoning
          std::string_view r = std::string_view(buf_).substr(0, call);
          while (!r.empty() && r.back() == '\n') r.remove_suffix(1);
          emit_reasoning(r, out);
          buf_.erase(0, call + kCallOpen.size());
          call_scanned_ = 0;
          call_in_reasoning_ = true;
          mode_ = Mode::kToolCall;
          continue;
        }
        if (end != std::string::npos) {
          std::string_view r = std::string_view(buf_).substr(0, end);
          while (!r.empty() && r.back() == '\n') r.remove_suffix(1);
          emit_reasoning(r, out);
          buf_.erase(0, end + kThinkClose.size());
          mode_ = Mode::kContent;
          continue;
        }
        // Hold a possible partial </think> or <tool_call> and the newlines before it.
        size_t cut =
            buf_.size() - (final ? 0
                                 : std::max(partial_tag(buf_, kThinkClose),
                                            tool_calls_ ? partial_tag(buf_, kCallOpen) : 0));
        while (cut > 0 && buf_[cut - 1] == '\n') --cut;
        emit_reasoning(std::string_view(buf_).substr(0, cut), out);
        buf_.erase(0, final ? buf_.size() : cut);
        return;
      }
      case Mode::kContent: {
        size_t open = tool_calls_ ? buf_.find(kCallOpen) : std::string::npos;
        if (open != std::string::npos) {
          emit_content(std::string_view(buf_).substr(0, open), out);
          space_before_call_ = std::move(held_space_);
          held_space_.clear();
          buf_.erase(0, open + kCallOpen.size());
          call_scanned_ = 0;
          mode_ = Mode::kToolCall;
          continue;
        }
        size_t keep = final || !tool_calls_ ? 0 : partial_tag(buf_, kCallOpen);
        emit_content(std::string_view(buf_).substr(0, buf_.size() - keep), out);
        buf_.erase(0, buf_.size() - keep);
        return;
      }
      case Mode::kToolCall: {
        // A call starts with <function=...> (or Qwen3's JSON): anything else
        // after the tag is prose that mentions it, released at once.
        if (call_scanned_ == 0) {
          const std::string_view rest = std::string_view(buf_).substr(
              std::min(buf_.size(), buf_.find_first_not_of(" \t\r\n")));
          constexpr std::string_view kFunction = "<function=";
          if (rest.empty() || (kFunction.starts_with(rest) && rest.size() < kFunction.size())) {
            if (!final) return;
          } else if (!rest.starts_with(kFunction) && rest.front() != '{') {
            emit_text(kCallOpen, out);
            continue;
          }
        }
        size_t close = buf_.find(kCallClose, call_scanned_);
        if (close == std::string::npos) {
          // Long arguments arrive in many pieces: search only the new text next time.
          call_scanned_ = buf_.size() - std::min(buf_.size(), kCallClose.size() - 1);
          if (!final) return;
          // Cut off inside a call: what was generated is shown as text.
          emit_text(std::string(kCallOpen) + buf_, out);
          buf_.clear();
          return;
        }
        std::string_view block = std::string_view(buf_).substr(0, close);
        if (auto call = parse_tool_call(block, schemas_)) {
          out.tool_calls.push_back(std::move(*call));
          mode_ = call_in_reasoning_ ? Mode::kReasoning : Mode::kContent;
        } else {
          emit_text(std::string(kCallOpen).append(block).append(kCallClose), out);
        }
        space_before_call_.clear();
        call_in_reasoning_ = false;
        buf_.erase(0, close + kCallClose.size());
        continue;
      }
    }
  }
}

bool prompt_opens_reasoning(std::string_view prompt) {
  while (!prompt.empty() && is_space(prompt.back())) prompt.remove_suffix(1);
  return prompt.ends_with(kThinkOpen);
}

ParsedDelta parse_output(std::string_view text, bool in_reasoning,
                         const nlohmann::ordered_json& tools) {
  OutputParser p(in_reasoning, tools);
  ParsedDelta out = p.push(text);
  out.append(p.finish());
  return out;
}

}  // namespace tern
