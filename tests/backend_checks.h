// Checks every backend must pass, run on the CPU (tests/cpu) and on the GPU
// (tests/cuda): session state saved, restored and forked gives the very
// logits of an uninterrupted run, also through the disk cache's bytes; a
// completion split over several generate() calls is the completion of one
// call; sequences decoded together by step() are decoded as alone, masked or
// not; sampling histories are bounded.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/constraint.h"
#include "backend/sampler.h"
#include "core/error.h"

namespace tern::test {

inline std::vector<int32_t> ids_from(int n, int32_t seed, int vocab) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = int32_t((seed + 7919 * int64_t(i)) % vocab);
  return v;
}

// A constraint that needs no grammar: every third step free, else a subset
// of the vocabulary that depends on the step and the token before (as a
// grammar's does), never empty. It checks that each chosen token was allowed.
class HashConstraint final : public TokenConstraint {
 public:
  explicit HashConstraint(int vocab) : vocab_(vocab) {}
  bool unconstrained() const override { return step_ % 3 == 2; }
  void allowed(std::span<uint32_t> words) override {
    std::mt19937 g(uint32_t(step_ * 7919 + prev_));
    for (uint32_t& w : words) w = uint32_t(g()) & uint32_t(g()) & uint32_t(g());
    words[0] |= 1u;  // token 0 always allowed
    last_.assign(words.begin(), words.end());
  }
  void accept(int32_t t) override {
    ASSERT_TRUE(t >= 0 && t < vocab_);
    if (!unconstrained()) {
      EXPECT_TRUE((last_[size_t(t) / 32] >> (t % 32)) & 1u) << "token " << t;
    }
    prev_ = t, ++step_;
  }

 private:
  int vocab_, step_ = 0;
  int32_t prev_ = -1;
  std::vector<uint32_t> last_;
};

// P then R on a fresh sequence, against: P, a save, Q, a restore, R; and a
// fork at the save, then R. The same computations in the same order, so the
// logits must be identical, bit for bit.
inline void check_save_restore_fork(Backend& be) {
  const int V = be.config().vocab;
  const auto P = ids_from(23, 3, V), Q = ids_from(9, 11, V), R = ids_from(6, 5, V);
  std::vector<float> want, got, scratch;
  {
    auto s = be.new_sequence();
    be.forward(*s, P, Logits::last, scratch);
    be.forward(*s, R, Logits::all, want);
  }
  auto s = be.new_sequence();
  be.forward(*s, P, Logits::last, scratch);
  const auto st = be.save(*s);
  EXPECT_EQ(st->length(), int64_t(P.size()));
  EXPECT_GT(st->bytes(), 0u);
  be.forward(*s, Q, Logits::last, scratch);
  auto f = be.fork(*s, *st);  // from a sequence that has moved on
  EXPECT_EQ(f->length(), int64_t(P.size()));
  be.restore(*s, *st);
  EXPECT_EQ(s->length(), int64_t(P.size()));
  be.forward(*s, R, Logits::all, got);
  EXPECT_EQ(got, want) << "restored";
  be.forward(*f, R, Logits::all, got);
  EXPECT_EQ(got, want) << "forked";
  // A restore of the same state twice (the cache serves a snapshot again).
  be.restore(*s, *st);
  be.forward(*s, R, Logits::all, got);
  EXPECT_EQ(got, want) << "restored again";
}

// The disk cache's bytes: KV exported in two pieces (ends off the CUDA
// cache's 16-position chunks) and the state, imported into a new sequence,
// continue exactly as the original.
inline void check_bytes_round_trip(Backend& be) {
  const ModelConfig& c = be.config();
  const std::vector<int32_t> ids = ids_from(40, 5, c.vocab);
  auto seq = be.new_sequence();
  std::vector<float> none, a, b;
  be.forward(*seq, std::span(ids).first(37), Logits::none, none);
  const auto state = be.save(*seq);
  std::vector<std::byte> kv1, kv2, st;
  auto into = [](std::vector<std::byte>& v) {
    return [&v](std::span<const std::byte> x) { v.insert(v.end(), x.begin(), x.end()); };
  };
  be.export_kv(*seq, 0, 21, into(kv1));
  be.export_kv(*seq, 21, 37, into(kv2));
  be.export_state(*state, into(st));
  EXPECT_EQ(kv1.size(), be.kv_bytes(0, 21));
  EXPECT_EQ(kv2.size(), be.kv_bytes(21, 37));
  EXPECT_EQ(st.size(), be.state_bytes());
  auto from = [](const std::vector<std::byte>& v) {
    return [&v, at = size_t(0)](std::span<std::byte> out) mutable {
      ASSERT_LE(at + out.size(), v.size());
      std::copy_n(v.begin() + ptrdiff_t(at), out.size(), out.begin());
      at += out.size();
    };
  };
  auto copy = be.new_sequence();
  be.import_kv(*copy, 0, 21, from(kv1));
  be.import_kv(*copy, 21, 37, from(kv2));
  const auto imported = be.import_state(37, from(st));
  be.restore(*copy, *imported);
  EXPECT_EQ(copy->length(), 37);
  be.forward(*seq, std::span(ids).subspan(37), Logits::all, a);
  be.forward(*copy, std::span(ids).subspan(37), Logits::all, b);
  EXPECT_EQ(a, b) << be.name();
}

// n tokens in one generate() call, or in calls of the given sizes (each
// feeding the last token the one before delivered): the same tokens.
inline void check_split_generation(Backend& be, const SamplingParams& p) {
  const int V = be.config().vocab;
  const auto prompt = ids_from(12, 17, V);
  auto run = [&](const std::vector<int>& calls) {
    auto s = be.new_sequence();
    std::vector<float> logits;
    be.forward(*s, std::span(prompt).first(prompt.size() - 1), Logits::last, logits);
    be.start_sampling(*s, p, prompt);
    std::vector<int32_t> ids;
    int32_t next = prompt.back();
    for (int n : calls) {
      be.generate(*s, next, n, [&](int32_t t) {
        ids.push_back(t);
        return true;
      });
      next = ids.back();
    }
    EXPECT_EQ(s->length(), int64_t(prompt.size() + ids.size() - 1));
    return ids;
  };
  const auto whole = run({40});
  EXPECT_EQ(whole.size(), 40u);
  EXPECT_EQ(run({7, 13, 1, 19}), whole);
  EXPECT_EQ(run({1, 1, 38}), whole);
}

// Sequences of different lengths and sampling decoded together by step(),
// joining and leaving between steps: each one's choices and the raw logits
// they were drawn from are bit for bit those of one generate() call alone.
inline void check_step_equals_alone(Backend& be) {
  const int V = be.config().vocab;
  struct Case {
    std::vector<int32_t> prompt;
    SamplingParams p;
    int n, join;  // tokens, and the step it joins at
    bool masked = false;
  };
  // Up to 12 rows a step (past the CPU kernels' tiles of 8 tokens and the
  // CUDA step's 8 lanes), some of them masked.
  std::vector<Case> cases = {{ids_from(5, 3, V), {}, 12, 0},
                             {ids_from(17, 8, V), chat_sampling(4), 9, 0, true},
                             {ids_from(40, 2, V), chat_sampling(5), 6, 3},
                             {ids_from(2, 9, V), {}, 3, 5, true}};
  for (int i = 0; i < 8; ++i)
    cases.push_back({ids_from(3 + 7 * i, 11 + i, V),
                     i % 2 ? chat_sampling(6 + i) : SamplingParams{}, 4 + i % 3, i % 4,
                     i % 3 == 2});
  struct Run {
    std::unique_ptr<Sequence> seq;
    std::vector<int32_t> ids;
    std::vector<std::vector<float>> logits;
    std::unique_ptr<HashConstraint> mask;
    GenerateHooks hooks;
  };
  auto begin = [&](const Case& c, Run& r) {
    r.seq = be.new_sequence();
    std::vector<float> none;
    be.forward(*r.seq, std::span(c.prompt).first(c.prompt.size() - 1), Logits::none, none);
    be.start_sampling(*r.seq, c.p, c.prompt);
    r.hooks.on_logits = [&r](std::span<const float> l) {
      r.logits.emplace_back(l.begin(), l.end());
    };
    if (c.masked) r.mask = std::make_unique<HashConstraint>(V);
    r.hooks.constraint = r.mask.get();
  };
  std::vector<Run> alone(std::size(cases)), together(std::size(cases));
  for (size_t i = 0; i < std::size(cases); ++i) {
    begin(cases[i], alone[i]);
    be.generate(
        *alone[i].seq, cases[i].prompt.back(), cases[i].n,
        [&](int32_t t) {
          alone[i].ids.push_back(t);
          return true;
        },
        alone[i].hooks);
  }
  for (int k = 0;; ++k) {
    std::vector<StepRow> rows;
    std::vector<size_t> of;
    for (size_t i = 0; i < std::size(cases); ++i) {
      Run& r = together[i];
      if (k == cases[i].join) begin(cases[i], r);
      if (k < cases[i].join || int(r.ids.size()) == cases[i].n) continue;
      rows.push_back(
          {r.seq.get(), r.ids.empty() ? cases[i].prompt.back() : r.ids.back(), &r.hooks});
      of.push_back(i);
    }
    if (rows.empty()) break;
    be.step(rows);
    for (size_t j = 0; j < rows.size(); ++j) together[of[j]].ids.push_back(rows[j].next);
  }
  for (size_t i = 0; i < std::size(cases); ++i) {
    EXPECT_EQ(together[i].ids, alone[i].ids) << "sequence " << i;
    EXPECT_EQ(together[i].logits, alone[i].logits) << "sequence " << i;
  }
}

inline void check_history_bounds(Backend& be) {
  auto s = be.new_sequence();
  std::vector<float> logits;
  const auto P = ids_from(5, 2, be.config().vocab);
  be.forward(*s, P, Logits::last, logits);
  std::vector<int32_t> h = P;
  h.push_back(1);
  EXPECT_NO_THROW(be.start_sampling(*s, SamplingParams{}, h));  // the prompt and one to feed
  h.push_back(1);
  EXPECT_THROW(be.start_sampling(*s, SamplingParams{}, h), Error);
  EXPECT_THROW(be.start_sampling(*s, SamplingParams{}, std::vector<int32_t>{-1}), Error);
  EXPECT_THROW(be.start_sampling(*s, SamplingParams{}, std::vector<int32_t>{be.config().vocab}),
               Error);
}

}  // namespace tern::test
