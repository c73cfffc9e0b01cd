// A constraint on the tokens a completion may choose (grammar-constrained
// decoding): before each draw the backend asks which tokens are allowed, the
// others' logits become -inf, and the choice is reported back. The sampler is
// otherwise unchanged, so a constrained draw is the twin on every backend.
#pragma once

#include <cstdint>
#include <span>

namespace tern {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // True when every token is allowed next (no mask needed this step).
  virtual bool unconstrained() const { return false; }
  // The tokens allowed next: bit (i % 32) of words[i / 32] for vocabulary id
  // i, ceil(vocab / 32) words; at least one bit is set.
  virtual void allowed(std::span<uint32_t> words) = 0;
  // The token chosen (one the last mask allowed).
  virtual void accept(int32_t token) = 0;
  // Only an end token may follow: the completion is whole, generation stops.
  virtual bool done() const { return false; }
};

// Words of a mask over `vocab` ids.
inline size_t mask_words(int vocab) {
  return (size_t(vocab) + 31) / 32;
}

// logits[i] = -inf where bit i of the mask is clear.
void apply_mask(std::span<float> logits, std::span<const uint32_t> words);

}  // namespace tern
