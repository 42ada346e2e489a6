#!/usr/bin/env bash
# Runs fuzz targets of a TIDE_FUZZ build, each for SECONDS, starting from
# its committed seed corpus (fuzz/corpus/NAME, never written) and what
# earlier runs in this build found (BUILD/fuzz-work/NAME). A crash, a leak
# or a timeout fails the run and leaves the input in BUILD/fuzz-crashes/.
#   fuzz/run.sh BUILD SECONDS [NAME...]     (no NAME: every target)
set -euo pipefail
build=${1:?usage: run.sh BUILD SECONDS [NAME...]}
seconds=${2:?usage: run.sh BUILD SECONDS [NAME...]}
shift 2
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$build" && pwd)
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for c in "$here"/corpus/*/; do names+=("$(basename "$c")"); done
fi
failed=0
for name in "${names[@]}"; do
  bin="$build/fuzz/$name"
  if [ ! -x "$bin" ]; then
    echo "fuzz: $bin is not built (configure with -DTIDE_FUZZ=ON, clang)" >&2
    exit 1
  fi
  work="$build/fuzz-work/$name"
  crashes="$build/fuzz-crashes"
  mkdir -p "$work" "$crashes"
  echo "fuzz: $name for ${seconds}s"
  # -timeout: one input that takes this long is a hang; -rss_limit_mb: one
  # that needs this much memory is a failure too.
  if ! "$bin" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$crashes/$name-" "$work" "$here/corpus/$name" 2>"$build/fuzz-work/$name.log"; then
    tail -40 "$build/fuzz-work/$name.log" >&2
    echo "fuzz: $name FAILED; the input is in $crashes/" >&2
    failed=1
  else
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$build/fuzz-work/$name.log" | tr '\n' ' '
    echo
  fi
done
exit $failed
