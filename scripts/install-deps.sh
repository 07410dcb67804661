#!/usr/bin/env bash
# Installs what acqfs needs on Debian 12 (bookworm), from Debian's own
# packages:
#
#   bash scripts/install-deps.sh           to build and run acqfs itself: the
#                                          compiler, cmake, the libraries the
#                                          product links, fusermount3, git
#   bash scripts/install-deps.sh --tests   that, plus what the tests and the
#                                          benchmarks need (GoogleTest, Google
#                                          Benchmark, xxHash, strace, Podman,
#                                          Docker, the soak suite's Python, fio…)
#
# The first is what the README's quick start runs; the second is what
# scripts/run-tests.sh (and so CI) runs. Safe to run again: when every package
# is already installed it does nothing (set ACQFS_FORCE_DEPS=1 to run apt-get
# anyway). Works as root; otherwise it uses sudo when sudo exists.
set -euo pipefail

usage() { echo "usage: $0 [--tests]" >&2; exit 2; }
with_tests=0
for arg in "$@"; do
  case $arg in
    --tests) with_tests=1 ;;
    -h|--help) usage ;;
    *) echo "install-deps: unknown argument: $arg" >&2; usage ;;
  esac
done

# The product: what CMakeLists.txt's find_package/pkg_check_modules calls need
# with -DACQFS_BUILD_TESTS=OFF -DACQFS_BUILD_BENCH=OFF, and what acqfs runs.
packages=(
  build-essential cmake pkg-config         # compiler, build
  git ca-certificates                      # git: the bridge's remote, the demo
  libfuse3-dev fuse3                       # FUSE low-level API, fusermount3
  liburing-dev                             # FUSE over io_uring (fuse/uring_transport)
  libgit2-dev zlib1g-dev                   # git bridge, loose objects
  libspdlog-dev libfmt-dev                 # logging
  libcli11-dev nlohmann-json3-dev          # command line, state files
  bubblewrap                               # bwrap: the box of `acqfs run`
)

# The tests (tests/, ACQFS_BUILD_TESTS) and the benchmarks (bench/,
# ACQFS_BUILD_BENCH), on top of the product's.
test_packages=(
  libgtest-dev libgmock-dev googletest     # tests
  libxxhash-dev                            # tests: tree snapshots
  libbenchmark-dev                         # bench/
  attr util-linux kmod                     # getfattr/setfattr, mount, modprobe
  patch bsdutils                           # tests: diff replayed, script(1) pty
  strace                                   # tests: kill points (fault injection)
  fuse-overlayfs                           # peer overlay for benchmarks
  fio gnuplot-nox                          # benchmarks
  python3.11 libpython3.11-testsuite       # tests/soak: Python's own tests
  python3-minimal                          # /usr/bin/python3: the oracle tests' scripts
  podman runc busybox-static uidmap        # tests/container: podman on sandboxes
  docker.io                                # tests/container: dockerd of the test's own
)
if [[ $with_tests -eq 1 ]]; then packages+=("${test_packages[@]}"); fi
what=$([[ $with_tests -eq 1 ]] && echo "product and test" || echo "product")

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 && -z "${ACQFS_FORCE_DEPS:-}" ]]; then
  echo "install-deps: all ${#packages[@]} $what packages already installed"
  exit 0
fi

as_root=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
  else
    echo "install-deps: not root and sudo is missing; run this script as root" >&2
    echo "install-deps: missing packages: ${missing[*]:-none (ACQFS_FORCE_DEPS set)}" >&2
    exit 1
  fi
fi

echo "install-deps: installing: ${missing[*]:-${packages[*]}}"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update </dev/null
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${packages[@]}" </dev/null
