#!/usr/bin/env bash
# Benchmarks of a sandbox's stack (docs/stack.md): checkpoint time against
# the number of changed files (mounted, with writes running), fork time,
# first lookups and `git status` with 0, 4 and 16 frozen layers against
# none, and squash time. Results in docs/benchmarks.md ("Checkpoints").
#
# Usage: bench/workloads/stack.sh [--quick] [--acqfs PATH] [--work DIR]
#   --quick   changed files 1, 100, 1000 (else 1 ... 100000) and a 2,000-file
#             checkout (else 20,000)
# Needs root (or /dev/fuse usable), git. Leaves nothing behind: every mount
# is unmounted and the work directory removed on exit.
set -Eeuo pipefail
export LC_ALL=C
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC_ROOT=$(cd "$HERE/../.." && pwd)
ACQFS="$SRC_ROOT/build/bin/acqfs"
QUICK=0
WORK=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) QUICK=1 ;;
    --acqfs) ACQFS=$2; shift ;;
    --work) WORK=$2; shift ;;
    -h|--help) sed -n 2,11p "$0"; exit 0 ;;
    *) echo "stack.sh: unknown option $1" >&2; exit 1 ;;
  esac
  shift
done
[[ -x $ACQFS ]] || { echo "stack.sh: no acqfs binary at $ACQFS" >&2; exit 1; }
if [[ -z $WORK ]]; then WORK=$(mktemp -d /tmp/acqfs-stack-bench.XXXXXX); fi
STATE="$WORK/state"
export ACQFS_STATE_DIR=$STATE
cleanup() {
  for m in "$WORK"/mnt*; do
    if mountpoint -q "$m" 2>/dev/null; then "$ACQFS" umount "$m" --no-export >/dev/null 2>&1 || fusermount3 -u -z "$m" || true; fi
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

if [[ $QUICK == 1 ]]; then SIZES="1 100 1000"; FILES=2000; else SIZES="1 100 1000 10000 100000"; FILES=20000; fi
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
median() { sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }

# The host: a checkout of FILES files in directories of 100.
HOST="$WORK/host"
mkdir -p "$HOST"
( cd "$HOST" && git init -q && for d in $(seq 1 $((FILES / 100))); do
    mkdir -p "d$d"; for f in $(seq 1 100); do echo "$d $f" > "d$d/f$f"; done; done &&
  git add -A && git -c user.name=b -c user.email=b@b commit -qm host )

echo "## Checkpoint time against changed files (mounted, a writer running)"
echo
echo "| changed files | checkpoint (ms, median of 5) |"
echo "| ---: | ---: |"
for n in $SIZES; do
  mnt="$WORK/mnt-c$n"; mkdir -p "$mnt"
  "$ACQFS" mount "$HOST" "$mnt" --name "c$n" >/dev/null
  ( cd "$mnt" && for b in $(seq 0 $(( (n - 1) / 1000 ))); do mkdir -p "changed/b$b"; done &&
    for i in $(seq 1 "$n"); do echo x > "changed/b$(( (i - 1) / 1000 ))/f$i"; done )
  # A build's worth of writes while the checkpoints are taken.
  ( while :; do echo y >> "$mnt/busy.log"; cp "$mnt/d1/f1" "$mnt/busy.copy"; done ) &
  writer=$!
  times=$(for i in 1 2 3 4 5; do
    t0=$(now_ms); "$ACQFS" checkpoint "c$n" >/dev/null; t1=$(now_ms); echo $((t1 - t0))
  done)
  kill $writer; wait $writer 2>/dev/null || true
  echo "| $n | $(echo "$times" | median) |"
  "$ACQFS" umount "$mnt" --no-export >/dev/null
done
echo

echo "## Fork time"
echo
fork_times=$(for i in 1 2 3 4 5; do
  t0=$(now_ms); "$ACQFS" fork "c1" "f$i" --at 1 >/dev/null; t1=$(now_ms); echo $((t1 - t0))
done)
echo "fork of a sandbox at a checkpoint: $(echo "$fork_times" | median) ms (median of 5; command included)"
echo

echo "## First lookups and git status with frozen layers ($FILES-file checkout)"
echo
echo "| frozen layers | find . (first, ms) | git status (first, ms) | git status (warm, ms) |"
echo "| ---: | ---: | ---: | ---: |"
for k in 0 4 16; do
  mnt="$WORK/mnt-l$k"; mkdir -p "$mnt"
  "$ACQFS" mount "$HOST" "$mnt" --name "l$k" >/dev/null
  for i in $(seq 1 "$k"); do
    # Each turn changes files in a few directories and makes one.
    ( cd "$mnt" && for d in $(( (i * 7) % (FILES / 100) + 1 )) $(( (i * 13) % (FILES / 100) + 1 )); do
        echo "turn $i" >> "d$d/f1"; done && mkdir -p "turn$i" && echo "$i" > "turn$i/t" )
    "$ACQFS" checkpoint "l$k" >/dev/null
  done
  "$ACQFS" umount "$mnt" --no-export >/dev/null
  f=(); s=(); w=()
  for r in 1 2 3; do
    "$ACQFS" mount "$HOST" "$mnt" --name "l$k" >/dev/null
    t0=$(now_ms); (cd "$mnt" && find . -path ./.git -prune -o -print | wc -l >/dev/null); t1=$(now_ms)
    "$ACQFS" umount "$mnt" --no-export >/dev/null
    "$ACQFS" mount "$HOST" "$mnt" --name "l$k" >/dev/null
    t2=$(now_ms); git -C "$mnt" status --porcelain >/dev/null; t3=$(now_ms)
    git -C "$mnt" status --porcelain >/dev/null; t4=$(now_ms)
    "$ACQFS" umount "$mnt" --no-export >/dev/null
    f+=($((t1 - t0))); s+=($((t3 - t2))); w+=($((t4 - t3)))
  done
  echo "| $k | $(printf '%s\n' "${f[@]}" | median) | $(printf '%s\n' "${s[@]}" | median) | $(printf '%s\n' "${w[@]}" | median) |"
done
echo

echo "## Squash"
echo
t0=$(now_ms); "$ACQFS" squash l16 --keep 0 >/dev/null; t1=$(now_ms)
echo "squash of 16 frozen layers into one: $((t1 - t0)) ms"
