// Grammar-constrained decoding as a TokenConstraint (backend/constraint.h):
// a matcher that masks the tokens its grammar does not allow, with the
// phases a chat answer has: free while reasoning (until </think>), and for
// tool_choice "auto" free text in which the <tool_call> token starts a call
// the grammar then carries to its </tool_call>. When the grammar may end, the
// stop tokens are allowed; when nothing may follow, only they are.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "backend/constraint.h"
#include "grammar/compiled_grammar.h"
#include "grammar/matcher.h"

namespace tern::grammar {

struct ConstraintConfig {
  std::vector<int32_t> stop_tokens;      // <|im_end|>, <|endoftext|>, the model's eos
  std::optional<int32_t> reasoning_end;  // thinking on: no constraint until this token (</think>)
  // tool_choice "auto": free text; this token (<tool_call>) starts the grammar,
  // which ends with the call, and the text is free again.
  std::optional<int32_t> trigger;
  int max_triggers = -1;  // with a trigger: calls allowed (-1: any number)
  // Called once, when generation first consults the constraint (the request
  // is being served, not refused): the grammar cache keeps it then.
  std::function<void()> on_use;
};

class GrammarConstraint final : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const CompiledGrammar> grammar, ConstraintConfig config);

  bool unconstrained() const override;
  void allowed(std::span<uint32_t> words) override;
  // tern::Error for a token the last mask did not allow.
  void accept(int32_t token) override;

  // The constrained text is whole: the grammar reached an end (with a
  // trigger: no call is open). For finish_reason "stop" / "tool_calls".
  bool completed() const;
  // Only a stop token may follow: the caller may stop generating now.
  bool done() const override { return phase_ == Phase::done; }
  // A constrained part is open (inside the answer grammar or a call).
  bool in_grammar() const { return phase_ == Phase::grammar; }
  int triggered() const { return triggered_; }

 private:
  void used();
  enum class Phase { reasoning, free, grammar, done };
  bool is_stop(int32_t token) const;
  void begin_grammar();

  std::shared_ptr<const CompiledGrammar> grammar_;
  ConstraintConfig config_;
  std::optional<Matcher> matcher_;
  Phase phase_;
  bool complete_ = false;  // on reaching Phase::done: whether the grammar's text was whole
  int triggered_ = 0;
};

}  // namespace tern::grammar
