// Backend's own members: start_sampling, generate and step by default
// (forward() one token at a time and the sequence's Sampler on its logits,
// masked by the constraint), the checks, the host's free memory. In
// tern_sampling, below the backends that inherit it.
#include <cmath>

#include "backend/backend.h"
#include "core/error.h"
#include "core/host_memory.h"

namespace tern {

void apply_mask(std::span<float> logits, std::span<const uint32_t> words) {
  TERN_CHECK(words.size() == mask_words(int(logits.size())));
  for (size_t i = 0; i < logits.size(); ++i)
    if (!(words[i / 32] >> (i % 32) & 1u)) logits[i] = -INFINITY;
}

size_t Backend::memory_free() const {
  return host_memory_available();
}

void Backend::check_history(const Sequence& seq, std::span<const int32_t> history) const {
  if (int64_t(history.size()) > seq.length() + 1)
    fail("a sampling history of {} tokens for a sequence of {} (at most one more)", history.size(),
         seq.length());
  check_ids(history);
}

void Backend::check_ids(std::span<const int32_t> ids) const {
  const int V = config().vocab;
  for (int32_t id : ids)
    if (id < 0 || id >= V) fail("token id {} is outside the vocabulary [0, {})", id, V);
}

void Backend::check_tokens(const Sequence& seq, std::span<const int32_t> tokens) const {
  const int64_t end = seq.length() + int64_t(tokens.size());
  if (tokens.empty()) fail("forward needs at least one token");
  if (end > config().max_positions)
    fail("sequence of {} tokens exceeds the model's {} positions", end, config().max_positions);
  check_ids(tokens);
}

void Backend::start_sampling(Sequence& seq, const SamplingParams& p,
                             std::span<const int32_t> history) {
  check_history(seq, history);
  Sampler s(p, config().vocab);
  for (int32_t t : history) s.count(t);
  seq.sampler.emplace(std::move(s));
}

void Backend::generate(Sequence& seq, int32_t first, int max_tokens,
                       const std::function<bool(int32_t)>& on_token, const GenerateHooks& hooks) {
  if (!seq.sampler) fail("generate() before start_sampling()");
  std::vector<float> logits;
  std::vector<uint32_t> mask;
  int32_t token = first;
  for (int n = 0; n < max_tokens; ++n) {
    forward(seq, std::span(&token, 1), Logits::last, logits);
    token = choose(seq, logits, hooks, mask);
    if (!on_token(token)) {
      if (n + 1 < max_tokens) forward(seq, std::span(&token, 1), Logits::last, logits);
      return;
    }
  }
}

int32_t Backend::choose(Sequence& seq, std::span<float> logits, const GenerateHooks& hooks,
                        std::vector<uint32_t>& mask) {
  if (hooks.on_logits) hooks.on_logits(logits);
  TokenConstraint* constraint = hooks.constraint;
  if (constraint && !constraint->unconstrained()) {
    mask.assign(mask_words(config().vocab), 0);
    constraint->allowed(mask);
    apply_mask(logits, mask);
  }
  const int32_t token = seq.sampler->next(logits);
  if (constraint) constraint->accept(token);
  return token;
}

void Backend::step(std::span<StepRow> rows) {
  for (StepRow& r : rows)
    generate(
        *r.seq, r.token, 1,
        [&](int32_t t) {
          r.next = t;
          return true;
        },
        *r.hooks);
}

}  // namespace tern
