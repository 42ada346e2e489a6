#!/usr/bin/env bash
# The pure cores stay pure: scheduler/ and ledger/ (tests aside) may not
# read a clock, start a thread, take a lock, do I/O, draw randomness or log
# (formatting with snprintf and converting dates with timegm are pure).
# Their callers pass time, randomness and input in; see DESIGN.md ("A pure
# scheduler", "Money is integers"). Run by ctest as purity_check.
set -uo pipefail
cd "$(dirname "$0")/.."

includes='#include <(thread|mutex|shared_mutex|condition_variable|future|chrono|random|fstream|iostream|filesystem|unistd\.h|fcntl\.h|sys/[a-z_]+\.h)>|#include <spdlog/|#include "common/(log|clock|paths|archive)\.h"'
calls='(^|[^A-Za-z_:.])(RandomHex|NewToken|NewId|rand|srand|time|clock|clock_gettime|gettimeofday|localtime|getenv|fopen|fprintf|popen|system|printf|puts|sleep|usleep)\(|std::(cout|cerr|clog|random_device|this_thread|chrono::(system|steady|high_resolution)_clock)|std::(thread|mutex|async)\b'

status=0
files=$(find scheduler ledger -name '*.h' -o -name '*.cc' | grep -v '_test\.cc$' | sort)
for f in $files; do
  # Comments say what the code does not do; only code counts.
  hits=$(sed -e 's://.*$::' "$f" | grep -nE "$includes|$calls" || true)
  if [ -n "$hits" ]; then
    echo "$f: not pure:"
    echo "$hits" | sed 's/^/  line /'
    status=1
  fi
done
[ $status -eq 0 ] && echo "purity: $(echo "$files" | wc -w) files of scheduler/ and ledger/ are pure"
exit $status
