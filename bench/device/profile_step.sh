#!/usr/bin/env bash
# On the GPU machine: per-kernel time of decode steps at one context length
# (ncu, clocks and caches left alone; kernels still run one at a time, so the
# total is above an event-timed step), aggregated by kernel name into $OUT/profile.txt.
# CONC=N: the steps of N requests decoding at once (tern bench --concurrency N,
# whose prompts' prefill kernels are listed too; a step has one arg-max launch).
set -uo pipefail
source "$(dirname "$0")/prebuilt_env.sh"
CTX=${CTX:-4096}
ncu --metrics gpu__time_duration.sum --csv --graph-profiling node --cache-control none --clock-control none \
  $BIN/tern bench --dummy 35b-a3b --backend cuda --decode "$CTX" --gen ${GEN:-2} --repeat 1 \
  ${CONC:+--concurrency $CONC} --json /tmp/p.json >/tmp/ncu.csv 2>/tmp/ncu.err
python3 - "$CTX" <<'PY' | tee $OUT/profile.txt
import csv, sys, collections, re
rows = [r for r in csv.reader(open("/tmp/ncu.csv")) if len(r) > 10]
head = rows[0]
k, v = head.index("Kernel Name"), head.index("Metric Value")
t = collections.defaultdict(list)
for r in rows[1:]:
    try:
        name = r[k].split("(")[0].split("<")[0]
        job = re.search(r"(\w+Job)", r[k])  # the tile kernel, per job
        t[name + (f"<{job.group(1)}>" if job else "")].append(float(r[v].replace(",", "")))
    except ValueError:
        pass
# The decode kernels of one step: divide by the number of steps seen (argmax runs once a step).
steps = max(1, sum(len(v) for n, v in t.items() if n.endswith("argmax_kernel")))
print(f"context {sys.argv[1]}: {steps} steps profiled; per step:")
total = 0
for name, vals in sorted(t.items(), key=lambda kv: -sum(kv[1])):
    if "fill_" in name or "copy" in name:
        continue
    us = sum(vals) / 1000 / steps
    total += us
    print(f"{name:32s} {len(vals)//steps:5d} launches {us:9.1f} us  {us/(len(vals)/steps):7.2f} us/launch")
print(f"{'total':32s} {'':15s} {total:9.1f} us")
PY
tail -3 /tmp/ncu.err
