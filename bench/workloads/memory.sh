#!/usr/bin/env bash
# The daemon's memory on a large tree: makes a lower of N empty files
# (1,000 directories of N/1,000), mounts it with acqfs, walks it twice with
# `find -ls` (a LOOKUP and the attributes of every entry), asks the kernel to
# drop its dentries and inodes (root only: /proc/sys/vm/drop_caches), walks
# it a third time, and prints the daemon's VmRSS, VmHWM and descriptors
# after each step, with the kernel's fuse_inode slab for comparison.
#
# Usage: bench/workloads/memory.sh [--entries N] [--acqfs PATH]
#        [--mount-opts OPTS] [--work DIR] [--keep]
# Unmounts and removes what it made on every exit (not SIGKILL).
set -Eeuo pipefail
export LC_ALL=C

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ACQFS="$HERE/../../build/bin/acqfs"
ENTRIES=1000000 OPTS="" WORK="" KEEP=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --entries) ENTRIES=$2; shift 2 ;;
    --acqfs) ACQFS=$2; shift 2 ;;
    --mount-opts) OPTS=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "memory.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ $ENTRIES =~ ^[0-9]+$ && $ENTRIES -ge 1000 ]] || { echo "memory.sh: --entries must be a number >= 1000" >&2; exit 2; }
[[ -x $ACQFS ]] || { echo "memory.sh: no acqfs binary at $ACQFS" >&2; exit 2; }
[[ -n $WORK ]] || WORK=$(mktemp -d /tmp/acqfs-memory.XXXXXX)
mkdir -p "$WORK"
LOWER="$WORK/lower" MNT="$WORK/mnt" STATE="$WORK/state" NAME="memory$$"
cleanup() {
  set +e
  if grep -q " $MNT " /proc/self/mounts; then
    "$ACQFS" umount "$NAME" --state-dir "$STATE" --no-export >/dev/null 2>&1 ||
      fusermount3 -u -z "$MNT"
  fi
  ((KEEP)) || rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

per_dir=$((ENTRIES / 1000))
if [[ ! -d $LOWER ]]; then
  echo "making $ENTRIES files in $LOWER"
  python3 - "$LOWER" "$per_dir" <<'EOF'
import os, sys
root, per = sys.argv[1], int(sys.argv[2])
os.mkdir(root)
for d in range(1000):
    dp = f"{root}/dir{d:04d}"
    os.mkdir(dp)
    for f in range(per):
        os.close(os.open(f"{dp}/file-{f:07d}.txt", os.O_CREAT | os.O_WRONLY, 0o644))
EOF
fi
mkdir -p "$MNT"
mopts=()
[[ -z $OPTS ]] || mopts=(-o "$OPTS")
"$ACQFS" mount "$LOWER" "$MNT" --name "$NAME" --state-dir "$STATE" "${mopts[@]}"
PID=$(head -n1 "$STATE/$NAME/daemon.pid" | cut -d' ' -f1)
report() {
  local rss hwm fds slab
  rss=$(awk '/^VmRSS/{print int($2/1024)}' /proc/"$PID"/status)
  hwm=$(awk '/^VmHWM/{print int($2/1024)}' /proc/"$PID"/status)
  fds=$(ls /proc/"$PID"/fd | wc -l)
  slab=$(awk '$1 == "fuse_inode" {printf "%d", $2 * $4 / 1048576}' /proc/slabinfo 2>/dev/null || true)
  printf '| %s | %s | %s | %s | %s | %s |\n' "$1" "${2:--}" "$rss" "$hwm" "$fds" "${slab:--}"
}
echo "| step | seconds | VmRSS MiB | VmHWM MiB | descriptors | kernel fuse_inode slab MiB |"
echo "|---|--:|--:|--:|--:|--:|"
report "mounted"
for i in 1 2; do
  t0=$EPOCHREALTIME
  find "$MNT" -ls >/dev/null
  t1=$EPOCHREALTIME
  report "walk $i" "$(awk -v a="${t0/./}" -v b="${t1/./}" 'BEGIN{printf "%.1f", (b-a)/1e6}')"
done
if [[ $(id -u) -eq 0 ]]; then
  sync
  echo 2 >/proc/sys/vm/drop_caches
  sleep 3
  report "kernel dropped its dentries"
  t0=$EPOCHREALTIME
  find "$MNT" -ls >/dev/null
  t1=$EPOCHREALTIME
  report "walk 3" "$(awk -v a="${t0/./}" -v b="${t1/./}" 'BEGIN{printf "%.1f", (b-a)/1e6}')"
fi
echo "daemon log warnings: $(grep -cE '\[(warning|error)\]' "$STATE/$NAME/daemon.log" || true)"
