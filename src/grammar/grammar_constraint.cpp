#include "grammar/grammar_constraint.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace tern::grammar {
namespace {

void set(std::span<uint32_t> words, int32_t id) {
  if (id >= 0 && size_t(id) < words.size() * 32) words[size_t(id) / 32] |= 1u << (id % 32);
}

}  // namespace

GrammarConstraint::GrammarConstraint(std::shared_ptr<const CompiledGrammar> grammar,
                                     ConstraintConfig config)
    : grammar_(std::move(grammar)), config_(std::move(config)) {
  if (config_.reasoning_end)
    phase_ = Phase::reasoning;
  else if (config_.trigger)
    phase_ = Phase::free;
  else
    begin_grammar();
}

void GrammarConstraint::begin_grammar() {
  matcher_.emplace(grammar_);
  phase_ = Phase::grammar;
}

bool GrammarConstraint::is_stop(int32_t token) const {
  return std::find(config_.stop_tokens.begin(), config_.stop_tokens.end(), token) !=
         config_.stop_tokens.end();
}

bool GrammarConstraint::unconstrained() const {
  if (phase_ == Phase::reasoning) return true;
  // Free text, unless the calls allowed are used up (then <tool_call> is masked).
  return phase_ == Phase::free && (config_.max_triggers < 0 || triggered_ < config_.max_triggers);
}

void GrammarConstraint::used() {
  if (config_.on_use) std::exchange(config_.on_use, nullptr)();
}

void GrammarConstraint::allowed(std::span<uint32_t> words) {
  used();
  if (phase_ == Phase::reasoning || phase_ == Phase::free) {
    std::fill(words.begin(), words.end(), ~0u);
    if (phase_ == Phase::free && !unconstrained())
      words[size_t(*config_.trigger) / 32] &= ~(1u << (*config_.trigger % 32));
    return;
  }
  std::fill(words.begin(), words.end(), 0u);
  if (phase_ == Phase::grammar) {
    matcher_->fill_mask(words);
    if (config_.trigger || !matcher_->can_end()) {
      if (std::any_of(words.begin(), words.end(), [](uint32_t w) { return w != 0; })) return;
      // No token spells what the grammar needs next: stop rather than choose nothing.
    }
  }
  for (int32_t t : config_.stop_tokens) set(words, t);
}

void GrammarConstraint::accept(int32_t token) {
  used();
  switch (phase_) {
    case Phase::reasoning:
      if (token == *config_.reasoning_end) {
        if (config_.trigger)
          phase_ = Phase::free;
        else
          begin_grammar();
      }
      return;
    case Phase::free:
      if (token == *config_.trigger) {
        if (config_.max_triggers >= 0 && triggered_ >= config_.max_triggers)
          fail("token {} starts a tool call after the allowed {}", token, config_.max_triggers);
        begin_grammar();
      }
      return;
    case Phase::grammar:
      if (matcher_->accept(token)) {
        if (matcher_->done()) {
          if (config_.trigger) {
            ++triggered_;
            phase_ = Phase::free;
          } else {
            phase_ = Phase::done;
            complete_ = true;
          }
        }
        return;
      }
      if (is_stop(token)) {  // the model ends the text (allowed where the grammar can end)
        complete_ = matcher_->can_end();
        phase_ = Phase::done;
        return;
      }
      fail("token {} is not allowed by the grammar here", token);
    case Phase::done:
      if (!is_stop(token)) fail("token {} after the grammar's end", token);
      return;
  }
}

bool GrammarConstraint::completed() const {
  if (config_.trigger) return phase_ != Phase::grammar;
  return phase_ == Phase::done ? complete_ : phase_ == Phase::grammar && matcher_->can_end();
}

}  // namespace tern::grammar
