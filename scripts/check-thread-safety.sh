#!/usr/bin/env bash
# clang's -Wthread-safety over the files whose shared state is annotated
# (common/thread_annotations.h): the server's core and rooms, and the
# agent-facing delivery. It compiles each with clang++ -fsyntax-only using
# the flags CMake recorded (BUILD/compile_commands.json); any warning of
# the analysis fails. Run by ctest as thread_safety_check.
#   scripts/check-thread-safety.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: check-thread-safety.sh BUILD_DIR}
cd "$(dirname "$0")/.."
clang=$(command -v clang++ || command -v clang++-14 || true)
if [ -z "$clang" ]; then
  echo "thread-safety: clang++ is not installed (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
files="server/core.cc server/core_api.cc server/core_money.cc server/delivery.cc"
python3 - "$build/compile_commands.json" "$clang" $files <<'PY'
import json, os, shlex, subprocess, sys
db, clang, files = sys.argv[1], sys.argv[2], sys.argv[3:]
commands = {os.path.realpath(e["file"]): e for e in json.load(open(db))}
failed = 0
for f in files:
    e = commands.get(os.path.realpath(f))
    if e is None:
        print(f"{f}: not in {db}", file=sys.stderr)
        failed = 1
        continue
    args = shlex.split(e["command"])[1:]
    keep, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD") or a.startswith("-W"):
            continue
        keep.append(a)
    cmd = [clang, "-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety"] + keep
    r = subprocess.run(cmd, cwd=e["directory"], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stderr, file=sys.stderr)
        failed = 1
    else:
        print(f"{f}: thread-safe")
sys.exit(failed)
PY
