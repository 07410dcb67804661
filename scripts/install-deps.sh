#!/usr/bin/env bash
# Installs everything acqfs needs to build, test and benchmark on Debian 12
# (bookworm), from Debian's own packages. Safe to run again: when every package
# is already installed it does nothing (set ACQFS_FORCE_DEPS=1 to run apt-get
# anyway). Works as root; otherwise it uses sudo when sudo exists.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git ca-certificates
  libfuse3-dev fuse3                       # FUSE low-level API, fusermount3
  libgit2-dev libxxhash-dev zlib1g-dev     # git bridge, hashing, loose objects
  libspdlog-dev libfmt-dev                 # logging
  libcli11-dev nlohmann-json3-dev          # command line, state files
  libgtest-dev libgmock-dev googletest     # tests
  libbenchmark-dev                         # bench/
  attr util-linux kmod                     # getfattr/setfattr, mount, modprobe
  patch bsdutils                           # tests: diff replayed, script(1) pty
  strace                                   # tests: kill points (fault injection)
  bubblewrap                               # bwrap: the box of `acqfs run`
  fuse-overlayfs                           # peer overlay for benchmarks
  fio gnuplot-nox                          # benchmarks
  python3.11 libpython3.11-testsuite       # tests/soak: Python's own tests
  python3-minimal                          # /usr/bin/python3: the oracle tests' scripts
  podman runc busybox-static uidmap        # tests/container: podman on sandboxes
  docker.io                                # tests/container: dockerd of the test's own
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 && -z "${ACQFS_FORCE_DEPS:-}" ]]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
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
