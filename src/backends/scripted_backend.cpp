#include "backends/scripted_backend.h"

#include <algorithm>

#include "core/error.h"
#include "core/hash.h"

namespace tern {

namespace {

class ScriptedSequence : public Sequence {
 public:
  std::vector<int32_t> tokens;
  int64_t prompt_end = -1;  // where the completion begins (start_sampling), -1: none
  void set_length(int64_t n) { length_ = n; }
};

struct ScriptedState : SequenceState {
  explicit ScriptedState(int64_t n) { length_ = n; }
  size_t bytes() const override { return sizeof(*this); }
};

}  // namespace

ScriptedBackend::ScriptedBackend(const ModelConfig& cfg, const Tokenizer& tok,
                                 std::vector<ScriptEntry> script)
    : cfg_(cfg), tok_(tok), script_(std::move(script)) {
  const auto end = tok.token_id("<|im_end|>");
  if (!end) fail("the scripted backend needs a tokenizer with <|im_end|>");
  end_id_ = *end;
}

std::unique_ptr<Sequence> ScriptedBackend::new_sequence() {
  return std::make_unique<ScriptedSequence>();
}

int32_t ScriptedBackend::next_token(const Sequence& seq) const {
  const auto& s = static_cast<const ScriptedSequence&>(seq);
  if (s.prompt_end < 0 || s.prompt_end > int64_t(s.tokens.size())) return end_id_;
  std::string prompt, said;
  for (int64_t i = 0; i < int64_t(s.tokens.size()); ++i)
    (i < s.prompt_end ? prompt : said) += tok_.token_bytes(s.tokens[size_t(i)]);
  const ScriptEntry* pick = nullptr;
  size_t where = 0;
  for (const ScriptEntry& e : script_) {
    const size_t at = e.trigger.empty() ? 0 : prompt.rfind(e.trigger);
    if (at == std::string::npos) continue;
    if (!pick || at + e.trigger.size() > where) pick = &e, where = at + e.trigger.size();
  }
  if (!pick || pick->reply.compare(0, said.size(), said) != 0 || said.size() >= pick->reply.size())
    return end_id_;
  const std::vector<int32_t> rest = tok_.encode(std::string_view(pick->reply).substr(said.size()));
  return rest.empty() ? end_id_ : rest.front();
}

void ScriptedBackend::forward(Sequence& seq, std::span<const int32_t> tokens, Logits which,
                              std::vector<float>& logits) {
  auto& s = static_cast<ScriptedSequence&>(seq);
  check_tokens(s, tokens);
  const size_t rows = which == Logits::none ? 0 : which == Logits::all ? tokens.size() : 1;
  logits.assign(rows * size_t(cfg_.vocab), 0.0f);
  for (size_t i = 0; i < tokens.size(); ++i) {
    s.tokens.push_back(tokens[i]);
    const bool row = which == Logits::all || (which == Logits::last && i + 1 == tokens.size());
    if (row)
      logits[(which == Logits::all ? i : 0) * size_t(cfg_.vocab) + size_t(next_token(s))] = 60;
  }
  s.set_length(int64_t(s.tokens.size()));
}

void ScriptedBackend::start_sampling(Sequence& seq, const SamplingParams& p,
                                     std::span<const int32_t> history) {
  Backend::start_sampling(seq, p, history);
  static_cast<ScriptedSequence&>(seq).prompt_end = seq.length() + 1;
}

std::unique_ptr<SequenceState> ScriptedBackend::save(const Sequence& seq) {
  return std::make_unique<ScriptedState>(seq.length());
}

void ScriptedBackend::restore(Sequence& seq, const SequenceState& st) {
  auto& s = static_cast<ScriptedSequence&>(seq);
  TERN_CHECK(st.length() <= s.length());
  s.tokens.resize(size_t(st.length()));
  s.prompt_end = -1;
  s.set_length(st.length());
}

std::unique_ptr<Sequence> ScriptedBackend::fork(const Sequence& seq, const SequenceState& st) {
  const auto& s = static_cast<const ScriptedSequence&>(seq);
  auto f = std::make_unique<ScriptedSequence>();
  f->tokens.assign(s.tokens.begin(), s.tokens.begin() + st.length());
  f->set_length(st.length());
  return f;
}

size_t ScriptedBackend::sequence_bytes(const Sequence& seq) const {
  return static_cast<const ScriptedSequence&>(seq).tokens.capacity() * sizeof(int32_t);
}

std::string ScriptedBackend::numerics_id() const {
  Hash64 h;
  for (const ScriptEntry& e : script_)
    for (const std::string* s : {&e.trigger, &e.reply}) {
      const uint64_t n = s->size();
      h.update(&n, sizeof n);
      h.update(s->data(), s->size());
    }
  return "scripted " + hex64(h.digest());
}

size_t ScriptedBackend::kv_bytes(int64_t from, int64_t to) const {
  return size_t(to - from) * sizeof(int32_t);
}

void ScriptedBackend::export_kv(const Sequence& seq, int64_t from, int64_t to,
                                const ByteSink& out) {
  const auto& s = static_cast<const ScriptedSequence&>(seq);
  TERN_CHECK(0 <= from && from <= to && to <= s.length());
  out(std::as_bytes(std::span(s.tokens).subspan(size_t(from), size_t(to - from))));
}

void ScriptedBackend::import_kv(Sequence& seq, int64_t from, int64_t to, const ByteSource& in) {
  auto& s = static_cast<ScriptedSequence&>(seq);
  TERN_CHECK(s.length() == from && from <= to);
  s.tokens.resize(size_t(to));
  in(std::as_writable_bytes(std::span(s.tokens).subspan(size_t(from), size_t(to - from))));
  check_ids(std::span(s.tokens).subspan(size_t(from)));
  s.set_length(to);
}

std::unique_ptr<SequenceState> ScriptedBackend::import_state(int64_t length, const ByteSource&) {
  return std::make_unique<ScriptedState>(length);
}

}  // namespace tern
