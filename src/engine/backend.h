// The interface every backend (CPU, CUDA) implements: one model definition,
// computed the same way everywhere. A Sequence holds one conversation's state
// (KV cache, recurrent and conv state, position); forward() appends tokens to it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "model/weights.h"

namespace tern {

class Sequence {
 public:
  virtual ~Sequence() = default;
  int64_t length() const { return length_; }

 protected:
  int64_t length_ = 0;
};

enum class Logits { last, all };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::unique_ptr<Sequence> new_sequence() = 0;
  // Runs `tokens` after those already in `seq`. Writes float logits for the
  // last token ([vocab]) or for every token ([n, vocab]) into `logits`.
  virtual void forward(Sequence& seq, std::span<const int32_t> tokens, Logits which,
                       std::vector<float>& logits) = 0;
  // Streams tokens: feeds `first` after the tokens in `seq` (`history`: those
  // tokens, for the penalties; `first` counts too), then each chosen token,
  // calling on_token with every choice in order until it returns false or
  // max_tokens were chosen. Afterwards `seq` holds every delivered token but
  // the last one when max_tokens ended the run; when on_token ended it, the
  // last one is fed too (the CUDA backend runs one step ahead of the caller,
  // and every backend does the same). The default runs forward() and Sampler.
  virtual void generate(Sequence& seq, std::span<const int32_t> history, int32_t first,
                        const SamplingParams& p, int max_tokens,
                        const std::function<bool(int32_t)>& on_token);
  virtual const ModelConfig& config() const = 0;
  virtual std::string name() const = 0;
};

std::unique_ptr<Backend> make_backend(const std::string& name,
                                      std::shared_ptr<const ModelWeights> weights);

}  // namespace tern
