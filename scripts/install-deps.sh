#!/usr/bin/env bash
# Installs the Debian 12 packages Tide builds and tests with, only those missing.
# Idempotent; needs root (or sudo) only when something is missing.
set -euo pipefail

packages=(
  g++ cmake ninja-build make pkg-config
  libboost-dev nlohmann-json3-dev libsqlite3-dev libspdlog-dev libcli11-dev
  libyaml-cpp-dev libssl-dev libarchive-dev libgtest-dev libgmock-dev libbenchmark-dev
  # the archives of what libarchive links: `tide` links it statically (TIDE_STATIC_DEPS)
  libzstd-dev liblz4-dev libacl1-dev libxml2-dev libicu-dev nettle-dev liblzma-dev
  libbz2-dev zlib1g-dev
  python3 procps
  # tests/e2e/first_day_test.cc runs the README's curl example as written
  curl
  # scripts/check-thread-safety.sh: clang's -Wthread-safety over the server's locks;
  # the sanitizer pass of `make test` (build-asan/): ASan, UBSan and libFuzzer's
  # runtimes, and the symbolizer that gives their reports file and line
  clang libclang-rt-14-dev llvm
  # the job sandbox (agent/runtime/sandbox.h) and OCI containers (runtime/oci.h);
  # busybox-static is the image the container tests run
  libseccomp-dev bubblewrap runc busybox-static
  # examples/pytorch-classifier and its end-to-end tests (CPU)
  python3-torch python3-torchvision
  # tests/browser/: the web console in a real browser (Playwright drives it)
  chromium
)
# The web console (web/) is built with Node.js 18 or later and npm: Debian's,
# unless the machine has its own.
if ! command -v npm >/dev/null 2>&1; then packages+=(nodejs npm); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
