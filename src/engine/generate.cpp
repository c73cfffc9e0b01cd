// The default Backend::generate: forward() one token at a time and the CPU
// Sampler on its logits. In tern_sampling, below the backends that inherit it.
#include "engine/backend.h"

namespace tern {

void Backend::generate(Sequence& seq, std::span<const int32_t> history, int32_t first,
                       const SamplingParams& p, int max_tokens,
                       const std::function<bool(int32_t)>& on_token) {
  Sampler sampler(p, config().vocab);
  for (int32_t t : history) sampler.feed(t);
  std::vector<float> logits;
  int32_t token = first;
  for (int n = 0; n < max_tokens; ++n) {
    forward(seq, std::span(&token, 1), Logits::last, logits);
    sampler.feed(token);
    token = sampler.next(logits);
    if (!on_token(token)) {
      if (n + 1 < max_tokens) forward(seq, std::span(&token, 1), Logits::last, logits);
      return;
    }
  }
}

}  // namespace tern
