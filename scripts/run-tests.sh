#!/usr/bin/env bash
# Installs the product's and the tests' dependencies (if missing), configures
# and builds acqfs with its tests and benchmarks in ./build, prepares the
# machine for FUSE and overlayfs tests, and runs every test with ctest. Exits
# with ctest's status. This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh --tests

if [[ $(id -u) -eq 0 ]]; then
  # Some machines ship /dev/fuse as 0600; the tests also mount as an
  # unprivileged user, which needs to open it.
  if [[ -c /dev/fuse ]]; then chmod 0666 /dev/fuse; fi
  # The interoperability tests mount the upper layer with the kernel overlayfs.
  if ! grep -qw overlay /proc/filesystems; then modprobe overlay || true; fi
fi

# Tests and benchmarks on explicitly: ./build may have been configured
# without them by the README's quick start, and CMake keeps that in its cache.
cmake -S . -B build -DACQFS_BUILD_TESTS=ON -DACQFS_BUILD_BENCH=ON
cmake --build build -j2

# --no-tests=error: a run that found no test is a failure, not a pass.
# --timeout: a hung mount must not eat the whole CI budget (tests may set their
# own TIMEOUT property, which wins).
status=0
ctest --test-dir build --output-on-failure --no-tests=error --timeout 900 \
  </dev/null || status=$?
exit "$status"
