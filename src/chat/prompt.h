// A conversation as the model's prompt, built one way for `tern run --chat`,
// `tern chat` and the server: rendered by the chat template with the
// assistant's turn opened, tokenized, and whether that opening already starts
// a reasoning block (the output parser must know).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tern {

struct ChatPrompt {
  nlohmann::ordered_json render;  // the template's request (next_turn_prefix starts from it)
  std::string text;
  std::vector<int32_t> ids;
  bool in_reasoning = false;
};

// `thinking`: enable_thinking when given (else the template's default);
// `tools`: the tool list offered (null: none). Throws ChatTemplateError for a
// conversation the template refuses.
ChatPrompt render_prompt(const Tokenizer& tok, nlohmann::ordered_json messages,
                         std::optional<bool> thinking = std::nullopt,
                         nlohmann::ordered_json tools = nullptr);

}  // namespace tern
