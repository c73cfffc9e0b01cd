// Where a prompt's prefill stops: a deterministic function of the prompt's
// tokens, so that every request cuts a shared prefix at the same positions.
// That is what makes session reuse exact: a snapshot is only restored at a
// position the new request would also have stopped at, so the state it
// restores is the very state a run without the cache computes there (the
// same forward() calls, the same arithmetic), whatever the backend.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace tern {

struct PrefillStop {
  int64_t at = 0;         // tokens prefilled when it is reached
  bool snapshot = false;  // keep the state here for later requests
};

struct PrefillPlan {
  std::vector<PrefillStop> stops;  // ascending; the last is the prompt's length - 1
  // Whether a snapshot at `length` may be restored for this prompt.
  bool stops_at(int64_t length) const;
  // The start of the generation prompt (the last message start), or the end.
  int64_t generation_start = 0;
};

struct PrefillPolicy {
  std::optional<int32_t> message_start;  // <|im_start|>: chat turns begin there
  std::optional<int32_t> user_role;      // the token after it in a user turn ("user")
  int64_t snapshot_every = 4096;         // 0: no periodic snapshots
  int64_t chunk = 512;                   // the longest forward() call
};

// The plan for prefilling prompt[0, n - 1) (generate() feeds the last token):
// stops at every message start (a snapshot at user turns and at the last
// one, the generation prompt), every snapshot_every tokens (counted from 0),
// at n - 1 (a snapshot: an exact repeat reuses it), and every chunk tokens
// after each of those stops where the gap to the next is longer.
PrefillPlan plan_prefill(std::span<const int32_t> prompt, const PrefillPolicy& p);

}  // namespace tern
