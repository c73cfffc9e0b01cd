#include "engine/prefill_plan.h"

#include <algorithm>
#include <map>

namespace tern {

bool PrefillPlan::stops_at(int64_t length) const {
  return std::binary_search(stops.begin(), stops.end(), PrefillStop{length, false},
                            [](const PrefillStop& a, const PrefillStop& b) { return a.at < b.at; });
}

PrefillPlan plan_prefill(std::span<const int32_t> prompt, const PrefillPolicy& p) {
  PrefillPlan plan;
  const int64_t end = int64_t(prompt.size()) - 1;
  plan.generation_start = std::max<int64_t>(end, 0);
  if (end <= 0) return plan;
  std::map<int64_t, bool> at;  // position -> snapshot
  auto add = [&](int64_t pos, bool snap) {
    if (pos > 0 && pos <= end) at[pos] = at[pos] || snap;
  };
  if (p.message_start) {
    int64_t last = -1;
    for (int64_t i = 0; i < end; ++i) {
      if (prompt[size_t(i)] != *p.message_start) continue;
      const bool user =
          p.user_role && i + 1 < int64_t(prompt.size()) && prompt[size_t(i + 1)] == *p.user_role;
      add(i, user);
      last = i;
    }
    if (last > 0) {
      add(last, true);
      plan.generation_start = last;
    }
  }
  if (p.snapshot_every > 0)
    for (int64_t i = p.snapshot_every; i < end; i += p.snapshot_every) add(i, true);
  add(end, true);
  // Chunk stops count from the stop before them, not from 0: a turn's few
  // new tokens then run as one call instead of being cut wherever a multiple
  // of the chunk falls. Still a function of the prefix alone: a gap's start
  // is, and a gap ends at a stop that both prompts of a restore share.
  int64_t from = 0;
  for (const auto& [pos, snap] : at) {
    if (p.chunk > 0)
      for (int64_t i = from + p.chunk; i < pos; i += p.chunk) plan.stops.push_back({i, false});
    plan.stops.push_back({pos, snap});
    from = pos;
  }
  return plan;
}

}  // namespace tern
