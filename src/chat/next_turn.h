// What a chat's next turn starts with, known as soon as an answer ends: the
// conversation so far, the answer as the template renders a past turn, and
// the next message's <|im_start|>. The server and `tern chat` prefill it
// while idle (docs/serving.md, "Idle prefill").
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

#include "chat/output_parser.h"
#include "tokenizer/tokenizer.h"

namespace tern {

// `render`: the render_chat request the answer was generated from (its
// add_generation_prompt is ignored). The tokens of its messages, `answer` as a
// past assistant turn (its reasoning dropped by the template) and the next
// message's <|im_start|>, where the next turn's prefill stops and keeps a
// snapshot; empty where the template refuses it. The next message is taken to
// be a tool result after tool calls, else the user's.
std::vector<int32_t> next_turn_prefix(nlohmann::ordered_json render, const Tokenizer& tok,
                                      const ParsedDelta& answer);

}  // namespace tern
