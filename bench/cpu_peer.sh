#!/bin/bash
# tern's CPU tables beside llama.cpp on the same cores, alternating, each run started on a quiet
# machine (no compiler or test runner, 1-minute load under 1).
#
#   bench/cpu_peer.sh ROUNDS TERN MODEL ISAS LLAMA_BENCH GGUF [BASE_TERN BASE_ISA]
#
# TERN bench runs every table in ISAS (comma-separated, as `tern bench --isa`) over MODEL;
# LLAMA_BENCH runs GGUF (a random GGUF of the same shapes); BASE_TERN, when given, runs BASE_ISA
# (through TERN_CPU_ISA) first in each round, so an older build's table is measured in the same
# minutes. Prompt 512, decode at 512, 2 threads.
set -u
rounds=$1 tern=$2 model=$3 isas=$4 llama=$5 gguf=$6 base=${7:-} base_isa=${8:-}
threads=${TERN_THREADS:-2}

quiet() {
  local t=0
  busy() {
    pgrep -f 'ninja|ctest|cc1plus|nvcc|node --test' >/dev/null ||
      awk '{ exit !($1 > 1.0) }' /proc/loadavg
  }
  while busy && [ $t -lt 900 ]; do sleep 15; t=$((t + 15)); done
  echo "load $(cut -d' ' -f1-3 /proc/loadavg) after waiting ${t}s"
}

bench_tern() { # label binary [isa list]
  quiet
  echo "== $1 $(date -u +%T)"
  local args=(bench --model "$model" --backend cpu --prefill 512 --decode 512 --gen 32 --repeat 3)
  [ -n "${3:-}" ] && args+=(--isa "$3")
  echo "\$ TERN_THREADS=$threads ${TERN_CPU_ISA:+TERN_CPU_ISA=$TERN_CPU_ISA }tern ${args[*]}"
  TERN_THREADS=$threads "$2" "${args[@]}" 2>&1 | grep -v " info "
}

for r in $(seq "$rounds"); do
  [ -n "$base" ] && TERN_CPU_ISA=$base_isa bench_tern "base $base_isa, round $r" "$base"
  bench_tern "tern $isas, round $r" "$tern" "$isas"
  quiet
  echo "== llama.cpp, round $r $(date -u +%T)"
  echo "\$ llama-bench -m $(basename "$gguf") -p 512 -n 32 -d 0,512 -t $threads -r 3"
  "$llama" -m "$gguf" -p 512 -n 32 -d 0,512 -t "$threads" -r 3 2>&1 | grep '^|'
done
