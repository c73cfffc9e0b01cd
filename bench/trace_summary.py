#!/usr/bin/env python3
"""Summarises `tern bench --trace` output: one row per kernel of the step,
averaged over its launches (layers and traced steps), in microseconds.

Launches are told apart by sorting blocks by start time (a kernel's blocks all
start before its dependent's, PDL launches only after every block has begun)
and cutting where the kind changes or a block index repeats. Cycles are turned
into time with each block's own ratio of globaltimer to clock64.

Columns: n = launches; blocks; span = first block start to last block end;
tail = last end minus the previous launch's last end (what the launch adds to
the chain); start = first start minus the previous launch's last end (negative:
started early); wait, stage, work = median over blocks of start->PDL wait
return, wait->staged input, staged->end.
"""
import csv
import statistics
import sys

KINDS = {1: "gemv_early", 2: "route_up", 3: "down", 4: "gdn_step", 5: "attn_split",
         6: "attn_combine"}


def launches(rows):
    rows.sort(key=lambda r: r["start_ns"])
    out, cur, seen = [], [], set()
    for r in rows:
        if cur and (r["kind"] != cur[0]["kind"] or r["block"] in seen):
            out.append(cur)
            cur, seen = [], set()
        cur.append(r)
        seen.add(r["block"])
    if cur:
        out.append(cur)
    return out


def name(kinds, i):
    """Names the dense GEMVs by their neighbours in the step."""
    k = kinds[i]
    if k != "gemv_early":
        return k
    nxt = kinds[i + 1] if i + 1 < len(kinds) else None
    prev = kinds[i - 1] if i > 0 else None
    if nxt == "gdn_step":
        return "gdn_in"
    if prev == "gdn_step":
        return "gdn_out"
    if nxt == "attn_split":
        return "qkv"
    if prev == "attn_combine":
        return "o_proj"
    return "lm_head"


def main(path):
    with open(path) as f:
        rows = [{k: int(v) for k, v in r.items()} for r in csv.DictReader(f)]
    ls = launches(rows)
    kinds = [KINDS.get(l[0]["kind"], str(l[0]["kind"])) for l in ls]
    stats = {}
    prev_end = None
    for i, l in enumerate(ls):
        first = min(r["start_ns"] for r in l)
        last_end = max(r["end_ns"] for r in l)
        ns = [(r["end_ns"] - r["start_ns"]) / max(r["ended_cyc"], 1) for r in l]
        wait = statistics.median(r["waited_cyc"] * k for r, k in zip(l, ns))
        stage = statistics.median(max(r["staged_cyc"] - r["waited_cyc"], 0) * k
                                  for r, k in zip(l, ns))
        work = statistics.median((r["ended_cyc"] - max(r["staged_cyc"], r["waited_cyc"])) * k
                                 for r, k in zip(l, ns))
        s = stats.setdefault(name(kinds, i), [])
        s.append((len(l), last_end - first,
                  None if prev_end is None else last_end - prev_end,
                  None if prev_end is None else first - prev_end, wait, stage, work))
        prev_end = last_end
    print(f"{len(ls)} launches from {len(rows)} block records")
    print(f"{'kernel':14}{'n':>4}{'blocks':>8}{'span':>8}{'tail':>8}{'start':>8}"
          f"{'wait':>8}{'stage':>8}{'work':>8}")
    for k, s in sorted(stats.items(), key=lambda kv: -sum(x[2] or 0 for x in kv[1])):
        def mean(j):
            v = [x[j] for x in s if x[j] is not None]
            return statistics.mean(v) / 1e3 if v else float("nan")
        print(f"{k:14}{len(s):4d}{statistics.mean(x[0] for x in s):8.0f}{mean(1):8.2f}"
              f"{mean(2):8.2f}{mean(3):8.2f}{mean(4):8.2f}{mean(5):8.2f}{mean(6):8.2f}")


if __name__ == "__main__":
    main(sys.argv[1])
