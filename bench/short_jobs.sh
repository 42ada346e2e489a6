#!/usr/bin/env bash
# Short jobs, Tide beside the Slurm peer in one run, on this machine:
#
#   sudo bench/short_jobs.sh [N] [LOOP_N]        (defaults 1000 and 300)
#
# 1. The Slurm peer (../shared/peers/slurm, or $SLURM_PEER; 4 nodes x 8
#    simulated GPUs): setup.sh, bench-submit.sh N (a loop of N `sbatch`
#    calls, then one `sbatch --array=1-N`), bench-latency.sh (sbatch to job
#    start, 10 repeats), then stop.sh, so that its daemons are idle while
#    Tide runs.
# 2. build/bench/tide-drain with 4 agents x 8 fake GPUs (the default
#    sandbox runtime, or TIDE_RUNTIME=process): a batch of N trials in one
#    request, LOOP_N `tide submit` processes one after another, start latency
#    over 50 jobs, Tide's CPU per job, and the start-up of one process
#    (/bin/true, a plain C++ program, tide --version, tide submit).
#
# Every job is a one-GPU `true`. Prints both tools' machine-readable lines,
# then a table of the figures side by side. Exits non-zero when either side
# measured nothing.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
N=${1:-1000}
LOOP_N=${2:-300}
PEER=${SLURM_PEER:-$ROOT/../shared/peers/slurm}
DRAIN=${TIDE_DRAIN:-$ROOT/build/bench/tide-drain}
[[ -x $PEER/setup.sh ]] || { echo "short_jobs.sh: no Slurm peer at $PEER (set SLURM_PEER)" >&2; exit 2; }
[[ -x $DRAIN ]] || { echo "short_jobs.sh: $DRAIN not built (cmake --build build --target tide-drain)" >&2; exit 2; }

out=$(mktemp -d /tmp/short-jobs-XXXXXX)
echo "== Slurm peer: setup"
"$PEER/setup.sh" > "$out/slurm-setup.log" 2>&1 || { cat "$out/slurm-setup.log" >&2; exit 1; }
echo "== Slurm peer: $N jobs in a loop of sbatch, then one array of $N"
"$PEER/bench-submit.sh" "$N" | tee "$out/slurm-submit.log"
echo "== Slurm peer: sbatch to start"
"$PEER/bench-latency.sh" | tee "$out/slurm-latency.log"
"$PEER/stop.sh" > /dev/null 2>&1 || true
echo "== Tide: $N trials in one batch, $LOOP_N tide submit processes"
"$DRAIN" --jobs "$N" --loop-jobs "$LOOP_N" --latency-jobs 50 --runtime "${TIDE_RUNTIME:-sandbox}" |
  tee "$out/tide.log"

slurm_submit=$(grep '^slurm submit_per_s=' "$out/slurm-submit.log" | tail -1)
slurm_latency=$(grep '^slurm latency_median_s=' "$out/slurm-latency.log" | tail -1)
tide=$(grep '^tide runtime=' "$out/tide.log" | tail -1)
[[ -n $slurm_submit && -n $slurm_latency && -n $tide ]] || {
  echo "short_jobs.sh: a side measured nothing; logs in $out" >&2
  exit 1
}
# field LINE NAME -> the value of NAME=VALUE in LINE
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<< " $1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1fx", a / b; else print "-" }'; }
ms() { awk -v s="$1" 'BEGIN { printf "%.0f", s * 1000 }'; }

s_array=$(field "$slurm_submit" array_jobs_per_s)
s_loop=$(field "$slurm_submit" jobs_per_s)
s_loop_submit=$(field "$slurm_submit" submit_per_s)
s_p50=$(ms "$(field "$slurm_latency" latency_median_s)")
s_max=$(ms "$(field "$slurm_latency" latency_max_s)")
t_batch=$(field "$tide" batch_jobs_per_s)
t_loop=$(field "$tide" loop_jobs_per_s)
t_loop_submit=$(field "$tide" loop_submit_per_s)
t_p50=$(field "$tide" start_p50_ms)
t_p99=$(field "$tide" start_p99_ms)

echo
echo "$slurm_submit"
echo "$slurm_latency"
echo "$tide"
echo
echo "| figure ($(date -u +%F), $(nproc) cores) | Slurm | Tide | Tide / Slurm |"
echo "| --- | --- | --- | --- |"
echo "| drain of $N jobs in one request (sbatch --array / a batch), jobs/s | $s_array | $t_batch | $(ratio "$t_batch" "$s_array") |"
echo "| one client process per job (sbatch / tide submit, $N / $LOOP_N jobs), jobs/s | $s_loop | $t_loop | $(ratio "$t_loop" "$s_loop") |"
echo "| ... their submissions/s | $s_loop_submit | $t_loop_submit | $(ratio "$t_loop_submit" "$s_loop_submit") |"
echo "| start latency p50, ms (sbatch to start / created to running) | $s_p50 | $t_p50 | |"
echo "| start latency, worst of 10 (Slurm) / p99 of 50 (Tide), ms | $s_max | $t_p99 | |"
echo "| Tide's CPU per job: server / agents (own time) / whole machine, ms | | $(field "$tide" server_cpu_ms_per_job) / $(field "$tide" agent_cpu_ms_per_job) / $(field "$tide" machine_cpu_ms_per_job) | |"
echo "| start-up p50, ms: /bin/true / plain C++ / tide --version / tide submit (idle server) | | $(field "$tide" true_ms) / $(field "$tide" cxx_ms) / $(field "$tide" version_ms) / $(field "$tide" idle_submit_ms) | |"
rm -rf "$out"
