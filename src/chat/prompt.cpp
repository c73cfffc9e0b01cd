#include "chat/prompt.h"

#include "chat/chat_template.h"
#include "chat/output_parser.h"

namespace tern {

ChatPrompt render_prompt(const Tokenizer& tok, nlohmann::ordered_json messages,
                         std::optional<bool> thinking, nlohmann::ordered_json tools) {
  ChatPrompt p;
  p.render = {{"messages", std::move(messages)}, {"add_generation_prompt", true}};
  if (!tools.is_null()) p.render["tools"] = std::move(tools);
  if (thinking) p.render["enable_thinking"] = *thinking;
  p.text = render_chat(p.render);
  p.ids = tok.encode(p.text);
  p.in_reasoning = prompt_opens_reasoning(p.text);
  return p;
}

}  // namespace tern
