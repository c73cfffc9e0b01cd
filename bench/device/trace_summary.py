#!/usr/bin/env python3
"""Summarises `tern bench --trace` output: one row per kernel of the step,
averaged over its launches (layers and traced steps), in microseconds.

Launches are told apart by sorting blocks by start time and cutting where the
kind changes (a kernel's blocks all start before its dependent's, and
neighbouring kernels of the step differ in kind). Every time is measured from
the previous launch's last block end (negative: before it), as the median
over the launch's blocks, then averaged over launches: block start, the marks
(PDL wait returned; route_up's fed logits fetched and its experts picked; loads
issued, input staged; the first batch's weights landed, its dot products done, its
reduction synced, its epilogue done; '-' where a kernel has none), the median and
the last block end. `last` is what the launch adds to the step; `2x`: SMs that ran
more than one of its blocks. The first in-projection of a step follows lm_head (both
dense GEMVs, so one launch here), which inflates its row.
"""
import collections
import csv
import statistics
import sys

KINDS = {1: "gemv_early", 2: "route_up", 3: "down", 4: "gdn_step", 5: "attn_split",
         6: "attn_combine"}
MARKS = ["waited", "fetched", "picked", "issued", "staged", "landed", "dotted", "synced", "first"]


def launches(rows):
    rows.sort(key=lambda r: r["start_ns"])
    out = []
    for r in rows:
        if not out or r["kind"] != out[-1][0]["kind"]:
            out.append([])
        out[-1].append(r)
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
    cols = ["start"] + MARKS + ["end", "last", "2x"]
    stats = {}
    prev_end = None
    for i, l in enumerate(ls):
        last_end = max(r["start_ns"] + r["ended"] for r in l)
        if prev_end is not None:
            med = lambda f: statistics.median(f(r) - prev_end for r in l)
            per_sm = collections.Counter(r["sm"] for r in l)
            v = {"start": med(lambda r: r["start_ns"]),
                 "2x": 1000 * sum(1 for n in per_sm.values() if n > 1),
                 "end": med(lambda r: r["start_ns"] + r["ended"]), "last": last_end - prev_end}
            for m in MARKS:
                if any(r.get(m, 0) for r in l):  # older traces lack some marks
                    v[m] = med(lambda r: r["start_ns"] + r[m])
            stats.setdefault(name(kinds, i), []).append((len(l), v))
        prev_end = last_end
    print(f"{len(ls)} launches from {len(rows)} block records; µs from the previous "
          "launch's last end")
    print(f"{'kernel':14}{'n':>4}{'blocks':>7}" + "".join(f"{c:>8}" for c in cols))
    for k, s in sorted(stats.items(), key=lambda kv: -sum(v["last"] for _, v in kv[1])):
        line = f"{k:14}{len(s):4}{statistics.mean(b for b, _ in s):7.0f}"
        for c in cols:
            xs = [v[c] for _, v in s if c in v]
            line += f"{statistics.mean(xs) / 1000:8.2f}" if xs else f"{'-':>8}"
        print(line)


if __name__ == "__main__":
    main(sys.argv[1])
