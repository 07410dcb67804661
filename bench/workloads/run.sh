#!/usr/bin/env bash
# Workload comparison of acqfs against native disk, the kernel overlayfs,
# fuse-overlayfs and (for workspace creation) a scratch `git clone`.
# Usage and flags: bench/workloads/run.sh --help, and bench/README.md.
#
# Everything it measures it generates itself under one work directory (so all
# targets share one filesystem), and it unmounts every mount it made and
# removes its data on every exit, Ctrl-C and kill included (not SIGKILL).
set -Eeuo pipefail
export LC_ALL=C
shopt -s nullglob

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC_ROOT=$(cd "$HERE/../.." && pwd)
GEN="$HERE/gen.sh"
PROG=run.sh

usage() {
  cat <<EOF
Usage: bench/workloads/run.sh [options]

Runs the agent workloads W1-W8 on native disk, the kernel overlayfs,
fuse-overlayfs and acqfs (plus a git clone for W1), and prints one markdown
table of medians and acqfs's ratios. acqfs runs on one FUSE transport or on
each in turn (--transport), one column per transport.

  --runs N            runs per workload, the median is reported (default 5; 1 with --quick)
  --quick             small sizes (5,000-file checkout, 3,000 small files,
                      64 MiB files, 50 C files) and 1 run: about a minute
  --scale N           an N-file checkout for W1-W3 and W8 (e.g. 1000000),
                      whatever the other sizes
  --agent-delay S     W2's delayed first status waits S seconds after the
                      mount, as an agent starting up does (default 2)
  --only LIST         workloads to run, e.g. W3,W5 (default W1,...,W8)
  --targets LIST      among native,kernel,fuse-overlayfs,acqfs,acqfs-uring,clone
                      (default native,kernel,fuse-overlayfs,acqfs,clone);
                      acqfs stands for the transports --transport picks,
                      acqfs-uring names the io_uring column alone
  --transport T       acqfs's FUSE transport: dev (column acqfs, mounted
                      with -o nouring: /dev/fuse), uring (column acqfs-uring:
                      FUSE over io_uring) or both (two columns and a uring/dev
                      ratio). Default: both when run as root on a kernel with
                      /sys/module/fuse/parameters/enable_uring, else dev.
                      uring sets that parameter to Y for the run and puts the
                      value it found back on every exit
  --acqfs PATH        the acqfs binary (default: build/bin/acqfs of this checkout)
  --mount-opts OPTS   extra options for acqfs mount -o (e.g. timeout=60), on
                      both transports
  --out DIR           where the table, results.tsv, the plot and logs go
                      (default /tmp/acqfs-bench-<date>)
  --work DIR          where data and sandboxes live (default: a new directory
                      under /tmp); data generated there by an earlier run with
                      --keep is reused
  --keep              keep the work directory (data, sandboxes) at the end
  -h, --help          this text

W1 workspace ready (mount, or clone) and its disk use; W2 git status, first
and second in a fresh sandbox, a first one --agent-delay seconds after the
mount, and the daemon's VmRSS after two find -ls; W3 tar of every file (warm); W4 make -j2 of a
C project; W5 extract then rm -rf many small files; W6 copy-up: append to
lower files and a 1-byte write into a big lower file; W7 fio sequential
read/write and 4 KiB random reads (MiB/s); W8 git add+commit, and acqfs export.
The kernel overlayfs needs root; without root it is skipped with a note.
So does acqfs-uring (it sets enable_uring): without root, or on a kernel
without FUSE over io_uring, --transport uring fails and --transport both
drops it with a note. Each acqfs mount is checked to run on its column's
transport (the daemon log's "fuse transport:" line), or the run stops.
EOF
}

die() { echo "$PROG: error: $*" >&2; exit 1; }
log() { printf '%s [%(%H:%M:%S)T] %s\n' "$PROG" -1 "$*" >&2; }
note() { NOTES+=("$*"); log "note: $*"; }

# ---------------------------------------------------------------- arguments
RUNS=5 RUNS_SET=0 QUICK=0 KEEP=0
ONLY="W1,W2,W3,W4,W5,W6,W7,W8"
TARGETS_ARG="native,kernel,fuse-overlayfs,acqfs,clone"
ACQFS="$SRC_ROOT/build/bin/acqfs"
MOUNT_OPTS=""
OUT=""
WORK=""
SCALE="" AGENT_DELAY=2
TRANSPORT=""   # dev, uring or both; empty: the default, chosen below
while [[ $# -gt 0 ]]; do
  case $1 in
    --runs) [[ $# -ge 2 ]] || die "--runs needs a value"; RUNS=$2; RUNS_SET=1; shift 2 ;;
    --runs=*) RUNS=${1#*=}; RUNS_SET=1; shift ;;
    --quick) QUICK=1; shift ;;
    --scale) [[ $# -ge 2 ]] || die "--scale needs a value"; SCALE=$2; shift 2 ;;
    --scale=*) SCALE=${1#*=}; shift ;;
    --agent-delay) [[ $# -ge 2 ]] || die "--agent-delay needs a value"; AGENT_DELAY=$2; shift 2 ;;
    --agent-delay=*) AGENT_DELAY=${1#*=}; shift ;;
    --only) [[ $# -ge 2 ]] || die "--only needs a value"; ONLY=$2; shift 2 ;;
    --only=*) ONLY=${1#*=}; shift ;;
    --targets) [[ $# -ge 2 ]] || die "--targets needs a value"; TARGETS_ARG=$2; shift 2 ;;
    --targets=*) TARGETS_ARG=${1#*=}; shift ;;
    --acqfs) [[ $# -ge 2 ]] || die "--acqfs needs a value"; ACQFS=$2; shift 2 ;;
    --acqfs=*) ACQFS=${1#*=}; shift ;;
    --transport) [[ $# -ge 2 ]] || die "--transport needs a value"; TRANSPORT=$2; shift 2 ;;
    --transport=*) TRANSPORT=${1#*=}; shift ;;
    --mount-opts) [[ $# -ge 2 ]] || die "--mount-opts needs a value"; MOUNT_OPTS=$2; shift 2 ;;
    --mount-opts=*) MOUNT_OPTS=${1#*=}; shift ;;
    --out) [[ $# -ge 2 ]] || die "--out needs a value"; OUT=$2; shift 2 ;;
    --out=*) OUT=${1#*=}; shift ;;
    --work) [[ $# -ge 2 ]] || die "--work needs a value"; WORK=$2; shift 2 ;;
    --work=*) WORK=${1#*=}; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "--runs must be a positive number, not '$RUNS'"
((QUICK && !RUNS_SET)) && RUNS=1

if ((QUICK)); then
  N_CHECKOUT=5000 N_SMALL=3000 N_CFILES=50 N_APPEND=2000 BIG_MIB=64 FIO_MIB=64
else
  N_CHECKOUT=100000 N_SMALL=30000 N_CFILES=300 N_APPEND=2000 BIG_MIB=256 FIO_MIB=1024
fi
if [[ -n $SCALE ]]; then
  [[ $SCALE =~ ^[1-9][0-9]*$ && $SCALE -ge 1000 ]] || die "--scale must be a number of files >= 1000, not '$SCALE'"
  N_CHECKOUT=$SCALE
fi
[[ $AGENT_DELAY =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--agent-delay must be a number of seconds, not '$AGENT_DELAY'"
FIO_SIZE="$FIO_MIB MiB"
((FIO_MIB % 1024 == 0)) && FIO_SIZE="$((FIO_MIB / 1024)) GiB"

declare -A WANT=()
IFS=, read -ra _w <<<"$ONLY"
for w in "${_w[@]}"; do
  w=${w^^}; w=${w// /}
  [[ $w =~ ^W[1-8]$ ]] || die "--only: unknown workload '$w' (W1 to W8)"
  WANT[$w]=1
done
((${#WANT[@]})) || die "--only selects no workload"

# FUSE over io_uring: the kernel offers it only while this parameter is Y,
# and only root can set it. The acqfs-uring target needs both.
URING_PARAM=/sys/module/fuse/parameters/enable_uring
uring_possible() { [[ $(id -u) -eq 0 && -f $URING_PARAM ]]; }
uring_why_not() {
  if [[ $(id -u) -ne 0 ]]; then echo "it must set $URING_PARAM to Y, which needs root (run as root)"
  else echo "this kernel ($(uname -r)) has no $URING_PARAM (FUSE over io_uring needs Linux 6.14+ with CONFIG_FUSE_IO_URING)"; fi
}
TRANSPORT_SET=1
if [[ -z $TRANSPORT ]]; then
  TRANSPORT_SET=0
  if uring_possible; then TRANSPORT=both; else TRANSPORT=dev; fi
fi
case $TRANSPORT in
  dev|fuse|/dev/fuse|nouring) TRANSPORT=dev ;;
  uring|io_uring|io-uring) TRANSPORT=uring ;;
  both|all) TRANSPORT=both ;;
  *) die "--transport must be dev, uring or both, not '$TRANSPORT'" ;;
esac

# acqfs (column acqfs) runs on /dev/fuse, mounted with -o nouring; acqfs-uring
# on FUSE over io_uring. In --targets, "acqfs" stands for the transports
# --transport picks, "acqfs-uring" for the io_uring one alone.
TARGETS=()
URING_NAMED=0
add_target() { [[ " ${TARGETS[*]} " == *" $1 "* ]] || TARGETS+=("$1"); }
IFS=, read -ra _t <<<"$TARGETS_ARG"
for t in "${_t[@]}"; do
  t=${t// /}
  case $t in
    native) add_target native ;;
    kernel|kernel-overlay|kernel-overlayfs|overlay|overlayfs) add_target kernel ;;
    fuse-overlayfs|fuse|fuse-overlay) add_target fuse ;;
    acqfs)
      [[ $TRANSPORT == uring ]] || add_target acqfs
      [[ $TRANSPORT == dev ]] || add_target acqfs-uring ;;
    acqfs-uring|acqfs-io_uring)
      ((TRANSPORT_SET)) && [[ $TRANSPORT == dev ]] &&
        die "--targets $t contradicts --transport dev (acqfs-uring is the io_uring column)"
      URING_NAMED=1
      add_target acqfs-uring ;;
    clone|git-clone) add_target clone ;;
    *) die "--targets: unknown target '$t' (native, kernel, fuse-overlayfs, acqfs, acqfs-uring, clone)" ;;
  esac
done
((${#TARGETS[@]})) || die "--targets selects no target"
has_target() { [[ " ${TARGETS[*]} " == *" $1 "* ]]; }
drop_target() {
  local t keep=()
  for t in "${TARGETS[@]}"; do [[ $t == "$1" ]] || keep+=("$t"); done
  TARGETS=("${keep[@]}")
}
is_acqfs() { [[ $1 == acqfs || $1 == acqfs-uring ]]; }
has_acqfs() { has_target acqfs || has_target acqfs-uring; }

NOTES=()
STAMP=$(date +%Y%m%d-%H%M%S)
[[ -n $OUT ]] || OUT="/tmp/acqfs-bench-$STAMP"

# ------------------------------------------------------------ prerequisites
need() { command -v "$1" >/dev/null 2>&1 || die "$1 is missing ($2); scripts/install-deps.sh installs it"; }
need git "package git"
need awk "package mawk or gawk"
need tar "package tar"
need du "package coreutils"
need mount "package mount"
if has_acqfs || has_target fuse; then need fusermount3 "package fuse3"; fi

if has_target kernel; then
  if [[ $(id -u) -ne 0 ]]; then
    drop_target kernel
    note "kernel overlayfs skipped: mounting it needs root (run as root to include it)"
  elif ! grep -qw overlay /proc/filesystems && ! modprobe overlay 2>/dev/null; then
    die "the kernel has no overlay filesystem (modprobe overlay failed); drop it with --targets"
  fi
fi
if has_target fuse; then
  need fuse-overlayfs "package fuse-overlayfs"
  [[ -c /dev/fuse ]] || die "/dev/fuse is missing"
fi
if has_target acqfs-uring && ! uring_possible; then
  if ((URING_NAMED)) || [[ $TRANSPORT == uring ]]; then
    die "acqfs-uring (FUSE over io_uring) cannot run: $(uring_why_not); use --transport dev"
  fi
  drop_target acqfs-uring
  note "acqfs-uring (FUSE over io_uring) skipped: $(uring_why_not); acqfs ran on /dev/fuse only"
fi
if has_acqfs; then
  [[ $ACQFS == */* ]] || ACQFS=$(command -v "$ACQFS" || true)
  [[ -x $ACQFS ]] || die "acqfs binary '$ACQFS' is not executable; build it (cmake --build build --target acqfs) or pass --acqfs PATH"
  ACQFS=$(realpath "$ACQFS")
  [[ -c /dev/fuse ]] || die "/dev/fuse is missing"
fi
[[ -n ${WANT[W4]:-} ]] && { need make "package make"; need cc "package gcc"; }
[[ -n ${WANT[W7]:-} ]] && need fio "package fio"
HAVE_GNUPLOT=0
if command -v gnuplot >/dev/null 2>&1; then HAVE_GNUPLOT=1; else note "gnuplot is missing (package gnuplot-nox): no plot"; fi

# The mount options of each acqfs target: acqfs adds nouring (/dev/fuse),
# acqfs-uring takes the default transport, io_uring while enable_uring is Y.
has_opt() { [[ ,$1, == *",$2,"* ]]; }
if has_target acqfs-uring && has_opt "$MOUNT_OPTS" nouring; then
  die "--mount-opts $MOUNT_OPTS has nouring, which contradicts the io_uring target acqfs-uring; use --transport dev"
fi
ACQFS_O=()
[[ -n $MOUNT_OPTS ]] && ACQFS_O=(-o "$MOUNT_OPTS")
if has_opt "$MOUNT_OPTS" nouring; then ACQFS_DEV_OPTS=$MOUNT_OPTS; else ACQFS_DEV_OPTS="${MOUNT_OPTS:+$MOUNT_OPTS,}nouring"; fi
ACQFS_DEV_O=(-o "$ACQFS_DEV_OPTS")
acqfs_mount_opts() {  # acqfs_mount_opts TARGET: its -o, for the report
  case $1 in
    acqfs) echo "-o $ACQFS_DEV_OPTS" ;;
    *) if [[ -n $MOUNT_OPTS ]]; then echo "-o $MOUNT_OPTS"; else echo "no -o"; fi ;;
  esac
}

# Git must not read the user's configuration, and commits need an identity.
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@localhost
export GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@localhost
export ACQFS_PROGRESS=never

WORK_CREATED=0 RUN_DIR="" DATA="" SLEEP_FD=""

# ------------------------------------------------ sandboxes and their cleanup
# A sandbox is registered before its mount is attempted, so the cleanup knows
# about a mount that was half made when the signal came.
declare -A SB_KIND=() SB_BASE=() SB_MNT=() SB_PID=() SB_NAME=() SB_STATE=()
SB_ORDER=()
SB="" MNT="" SB_READY=""

is_mounted() {  # exact mountpoint, from mountinfo, without forking
  local _a _b _c _d mp _rest
  while read -r _a _b _c _d mp _rest; do
    [[ $mp == "$1" ]] && return 0
  done </proc/self/mountinfo
  return 1
}

pid_alive() {  # a live (not zombie) process whose command is $2
  local pid=$1 comm state line
  [[ -n $pid && -r /proc/$pid/stat ]] || return 1
  { read -r line </proc/"$pid"/stat; } 2>/dev/null || return 1
  comm=${line#*(}; comm=${comm%)*}
  state=${line##*) }; state=${state%% *}
  [[ $state != Z && $state != X ]] || return 1
  [[ -z ${2:-} || $comm == "$2"* ]]
}

# Waits up to $2 seconds for pid $1 (command $3) to end; reaps it if it is ours.
wait_gone() {
  local pid=$1 secs=$2 comm=${3:-} end
  end=$((EPOCHSECONDS + secs))
  while pid_alive "$pid" "$comm"; do
    ((EPOCHSECONDS < end)) || return 1
    msleep 0.05
  done
  wait "$pid" 2>/dev/null || true
  return 0
}

# The process and all its descendants, parents first.
proc_tree() {
  local -A kids=()
  local p line rest ppid pid q out=()
  for p in /proc/[0-9]*; do
    { read -r line <"$p/stat"; } 2>/dev/null || continue
    rest=${line##*) }
    read -r _ ppid _ <<<"$rest"
    kids[$ppid]+="${p#/proc/} "
  done
  q=("$1")
  while ((${#q[@]})); do
    pid=${q[0]}; q=("${q[@]:1}")
    [[ -d /proc/$pid ]] && out+=("$pid")
    for p in ${kids[$pid]:-}; do q+=("$p"); done
  done
  echo "${out[@]:-}"
}

kill_tree() {  # stops the tree first so nothing forks meanwhile, then ends it
  local root=$1 pids more p i
  pids=$(proc_tree "$root")
  [[ -n $pids ]] || return 0
  kill -STOP $pids 2>/dev/null || true
  more=$(proc_tree "$root")
  pids=$(echo $pids $more | tr ' ' '\n' | sort -u | tr '\n' ' ')
  kill -STOP $pids 2>/dev/null || true
  kill -TERM $pids 2>/dev/null || true
  kill -CONT $pids 2>/dev/null || true
  for i in 1 2 3 4 5 6 7 8 9 10; do
    more=""
    for p in $pids; do pid_alive "$p" && more+="$p "; done
    [[ -n $more ]] || break
    msleep 0.2
  done
  [[ -n $more ]] && kill -KILL $more 2>/dev/null || true
  wait "$root" 2>/dev/null || true
}

# Unmounts sandbox $1. Strict (normal teardown): a failure is an error.
# Otherwise (cleanup): falls back to umount and then a lazy unmount.
unmount_sb() {
  local id=$1 strict=$2 kind=${SB_KIND[$1]} mnt=${SB_MNT[$1]} pid=${SB_PID[$1]:-} i
  [[ $kind == native ]] && return 0
  local log="$LOGS/unmount-$id.log"
  if is_mounted "$mnt"; then
    case $kind in
      acqfs|acqfs-uring)
        timeout 120 "$ACQFS" umount "${SB_NAME[$id]}" --state-dir "${SB_STATE[$id]}" --no-export >>"$log" 2>&1 ||
          echo "acqfs umount failed: exit $?" >>"$log" ;;
      fuse) fusermount3 -u "$mnt" >>"$log" 2>&1 || true ;;
      kernel) umount "$mnt" >>"$log" 2>&1 || true ;;
    esac
  fi
  for i in 1 2 3; do
    is_mounted "$mnt" || break
    msleep 0.5
    case $kind in
      acqfs|acqfs-uring|fuse) fusermount3 -u "$mnt" >>"$log" 2>&1 || umount "$mnt" >>"$log" 2>&1 || true ;;
      kernel) umount "$mnt" >>"$log" 2>&1 || true ;;
    esac
  done
  if is_mounted "$mnt" && [[ $strict == 1 ]]; then
    die "could not unmount $mnt ($kind): $(tail -n 3 "$log" 2>/dev/null | tr '\n' ' ')"
  fi
  if is_mounted "$mnt"; then
    echo "$PROG: warning: $mnt is busy; detaching it lazily" >&2
    case $kind in
      acqfs|acqfs-uring|fuse) fusermount3 -u -z "$mnt" >>"$log" 2>&1 || umount -l "$mnt" >>"$log" 2>&1 || true ;;
      kernel) umount -l "$mnt" >>"$log" 2>&1 || true ;;
    esac
  fi
  if [[ -n $pid ]]; then
    local comm=acqfs
    [[ $kind == fuse ]] && comm=fuse-overlayfs
    if ! wait_gone "$pid" 20 "$comm"; then
      [[ $strict == 1 ]] && die "$comm daemon $pid still runs 20 s after unmounting $mnt"
      echo "$PROG: warning: $comm daemon $pid still runs after the unmount; killing it" >&2
      kill -TERM "$pid" 2>/dev/null || true
      wait_gone "$pid" 5 "$comm" || { kill -KILL "$pid" 2>/dev/null || true; wait_gone "$pid" 5 "$comm" || true; }
    fi
  fi
  if is_mounted "$mnt"; then
    [[ $strict == 1 ]] && die "$mnt is still mounted"
    echo "$PROG: ERROR: $mnt is still mounted; unmount it by hand: umount -l $mnt" >&2
    return 1
  fi
  return 0
}

forget_sb() {
  local id=$1 keep=() x
  for x in "${SB_ORDER[@]}"; do [[ $x == "$id" ]] || keep+=("$x"); done
  SB_ORDER=("${keep[@]}")
  unset "SB_KIND[$id]" "SB_BASE[$id]" "SB_MNT[$id]" "SB_PID[$id]" "SB_NAME[$id]" "SB_STATE[$id]"
}

# Removes a directory tree without ever crossing into a mount.
remove_tree() {
  [[ -e $1 ]] || return 0
  rm -rf --one-file-system -- "$1" 2>/dev/null || { chmod -R u+rwx -- "$1" 2>/dev/null; rm -rf --one-file-system -- "$1"; }
}

# ------------------------------------------------------ acqfs's transports
# enable_uring is set to Y only when acqfs-uring runs; URING_FOUND keeps the
# value found (set before the write, so a signal in between still restores
# it), and the cleanup puts it back on every exit.
URING_FOUND="" URING_AT_START=""
declare -A TRANSPORT_SEEN=()
uring_enable() {
  local v
  read -r v <"$URING_PARAM" || die "cannot read $URING_PARAM"
  URING_AT_START=$v
  [[ $v == Y ]] && { log "$URING_PARAM is Y already; left as it is"; return 0; }
  URING_FOUND=$v
  { echo Y >"$URING_PARAM"; } 2>/dev/null || die "cannot set $URING_PARAM to Y"
  read -r v <"$URING_PARAM" || die "cannot read $URING_PARAM"
  [[ $v == Y ]] || die "$URING_PARAM reads $v after writing Y"
  log "set $URING_PARAM to Y for acqfs-uring (it was $URING_FOUND; put back on exit)"
}
uring_restore() {
  [[ -n $URING_FOUND ]] || return 0
  local v=""
  { echo "$URING_FOUND" >"$URING_PARAM"; } 2>/dev/null || true
  { read -r v <"$URING_PARAM"; } 2>/dev/null || true
  if [[ $v == "$URING_FOUND" ]]; then
    log "restored $URING_PARAM to $URING_FOUND"
    URING_FOUND=""
    return 0
  fi
  echo "$PROG: ERROR: could not restore $URING_PARAM to $URING_FOUND (it reads '$v'); do it by hand: echo $URING_FOUND > $URING_PARAM" >&2
  return 1
}
uring_still_on() {  # someone else may write the parameter meanwhile
  local v=""
  { read -r v <"$URING_PARAM"; } 2>/dev/null || true
  [[ $v == Y ]] || die "$URING_PARAM reads '$v' (set by something else during the run): acqfs-uring would run on /dev/fuse"
}

# check_transport ID: the daemon of acqfs sandbox ID must say (in its log,
# within 5 s of the mount) that it runs on its target's transport; a number
# measured on the other one must never reach the table.
check_transport() {
  local id=$1 target=${SB_KIND[$1]} want line="" l end
  local dlog="${SB_STATE[$1]}/${SB_NAME[$1]}/daemon.log"
  want="fuse transport: /dev/fuse ("
  [[ $target == acqfs-uring ]] && want="fuse transport: io_uring ("
  end=$((EPOCHSECONDS + 5))
  while :; do
    if [[ -f $dlog ]]; then
      while IFS= read -r l; do
        [[ $l == *"fuse transport: "* ]] && { line=$l; break; }
      done <"$dlog"
    fi
    [[ -n $line ]] && break
    ((EPOCHSECONDS <= end)) || die "$target: the daemon log $dlog has no 'fuse transport:' line 5 s after the mount (is $ACQFS older than the io_uring transport?)"
    msleep 0.01
  done
  [[ $line == *"$want"* ]] || die "$target must run on ${want#fuse transport: }...), but its daemon log says: $line"
  [[ -n ${TRANSPORT_SEEN[$target]:-} ]] || {
    TRANSPORT_SEEN[$target]=${line#*fuse transport: }
    log "$target: fuse transport: ${TRANSPORT_SEEN[$target]}"
  }
  return 0
}

# sb_create TARGET LOWER MODE TAG: a fresh sandbox over LOWER; sets SB (its
# id), MNT (where to work) and SB_READY (seconds from the mount command until
# the root directory could be listed). MODE matters for native only, which has
# no sandbox: ro works in LOWER itself, empty in a new directory, copy in a
# copy of LOWER made with cp -a, clone in a `git clone` of LOWER.
sb_create() {
  local target=$1 lower=$2 mode=$3 tag=$4
  local id="$tag-$target" base t0 t1 pid entries
  base="$RUN_DIR/sb/$id"
  [[ ! -e $base ]] || die "internal: sandbox $id exists"
  mkdir -p "$base"
  SB_KIND[$id]=$target SB_BASE[$id]=$base SB_PID[$id]=""
  SB_ORDER+=("$id")
  SB=$id SB_READY=""
  case $target in
    native)
      case $mode in
        ro) MNT=$lower ;;
        empty) MNT="$base/dir"; mkdir "$MNT" ;;
        copy) MNT="$base/dir"; mkdir "$MNT"; cp -a "$lower/." "$MNT/" ;;
        clone)
          MNT="$base/dir"
          git clone -q "$lower" "$MNT" >>"$LOGS/setup.log" 2>&1 || die "git clone $lower failed (see $LOGS/setup.log)"
          # Settle the index, so no entry is racily clean.
          msleep 1.1
          git -C "$MNT" status >/dev/null ;;
        *) die "internal: mode $mode" ;;
      esac
      SB_MNT[$id]=$MNT
      return 0 ;;
  esac
  MNT="$base/mnt"
  SB_MNT[$id]=$MNT
  mkdir -p "$MNT"
  case $target in
    kernel)
      mkdir -p "$base/upper" "$base/work"
      t0=$EPOCHREALTIME
      mount -t overlay overlay -o "lowerdir=$lower,upperdir=$base/upper,workdir=$base/work" "$MNT" \
        2>"$LOGS/mount-$id.log" || die "mount -t overlay on $MNT failed: $(cat "$LOGS/mount-$id.log")"
      entries=("$MNT"/*)
      t1=$EPOCHREALTIME ;;
    fuse)
      mkdir -p "$base/upper" "$base/work"
      t0=$EPOCHREALTIME
      # In the foreground, as our child: we know its pid and reap it.
      fuse-overlayfs -f -o "lowerdir=$lower,upperdir=$base/upper,workdir=$base/work" "$MNT" \
        >"$LOGS/fuse-overlayfs-$id.log" 2>&1 </dev/null &
      pid=$!
      SB_PID[$id]=$pid
      until is_mounted "$MNT"; do
        pid_alive "$pid" || die "fuse-overlayfs on $MNT exited: $(cat "$LOGS/fuse-overlayfs-$id.log")"
        (( ${EPOCHREALTIME%.*} - ${t0%.*} < 60 )) || die "fuse-overlayfs did not mount $MNT within 60 s"
        msleep 0.001
      done
      entries=("$MNT"/*)
      t1=$EPOCHREALTIME ;;
    acqfs|acqfs-uring)
      local name="$TAG-$id" state="$base/state" opts=("${ACQFS_DEV_O[@]}")
      ((${#name} <= 64)) || name="$TAG-$RANDOM$RANDOM"
      SB_NAME[$id]=$name SB_STATE[$id]=$state
      if [[ $target == acqfs-uring ]]; then
        opts=("${ACQFS_O[@]}")
        uring_still_on
      fi
      t0=$EPOCHREALTIME
      "$ACQFS" mount "$lower" "$MNT" --name "$name" --state-dir "$state" "${opts[@]}" \
        >"$LOGS/mount-$id.log" 2>&1 || die "$target mount on $MNT failed: $(cat "$LOGS/mount-$id.log")"
      entries=("$MNT"/*)
      t1=$EPOCHREALTIME
      read -r pid _ <"$state/$name/daemon.pid" || die "no daemon.pid for sandbox $name"
      [[ $pid =~ ^[0-9]+$ ]] || die "bad daemon.pid for sandbox $name"
      SB_PID[$id]=$pid
      check_transport "$id" ;;
    *) die "internal: target $target" ;;
  esac
  ((${#entries[@]})) || die "$target mount $MNT lists nothing after mounting"
  SB_READY=$(us_to_s $(( ${t1/./} - ${t0/./} )))
}

sb_disk_kib() {  # disk the sandbox uses: its upper and work, or acqfs's sandbox folder
  local id=$1
  case ${SB_KIND[$id]} in
    acqfs|acqfs-uring) du -sk "${SB_STATE[$id]}" | awk '{print $1}' ;;
    kernel|fuse) du -sck "${SB_BASE[$id]}/upper" "${SB_BASE[$id]}/work" | awk 'END{print $1}' ;;
    *) echo 0 ;;
  esac
}

sb_destroy() {
  local id=$1
  [[ -n ${SB_KIND[$id]:-} ]] || return 0
  unmount_sb "$id" 1
  if ((!KEEP)); then
    if is_acqfs "${SB_KIND[$id]}"; then
      # Removes the state folder and the sandbox-<name> remote from the lower.
      "$ACQFS" rm --force "${SB_NAME[$id]}" --state-dir "${SB_STATE[$id]}" >>"$LOGS/rm-$id.log" 2>&1 ||
        die "acqfs rm --force ${SB_NAME[$id]} failed: $(tail -n 3 "$LOGS/rm-$id.log")"
    fi
    remove_tree "${SB_BASE[$id]}"
  fi
  forget_sb "$id"
}

JOB_PID=""
CLEANED=0
cleanup() {
  local status=$? id left=() mp
  ((CLEANED)) && return 0
  CLEANED=1
  trap '' INT TERM HUP
  trap - ERR
  set +eEu
  if [[ -n $JOB_PID ]]; then
    log "stopping the running workload (pid $JOB_PID)"
    kill_tree "$JOB_PID"
    JOB_PID=""
  fi
  local n=${#SB_ORDER[@]}
  ((n)) && log "cleaning up $n sandbox(es)"
  for ((i = n - 1; i >= 0; i--)); do
    id=${SB_ORDER[$i]}
    unmount_sb "$id" 0 || left+=("${SB_MNT[$id]}")
    if ((!KEEP)) && is_acqfs "${SB_KIND[$id]}" && [[ -d ${SB_STATE[$id]} ]]; then
      timeout 60 "$ACQFS" rm --force "${SB_NAME[$id]}" --state-dir "${SB_STATE[$id]}" >/dev/null 2>&1 || true
    fi
  done
  # Anything else of ours still mounted (should never happen): detach it.
  local _a _b _c _d _r
  if [[ $RUN_DIR == /?*/acqfs-bench-run.$$ ]]; then
    while read -r _a _b _c _d mp _r; do
      case $mp in "$RUN_DIR"/*)
        echo "$PROG: warning: stray mount $mp; detaching it" >&2
        fusermount3 -u -z "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || left+=("$mp") ;;
      esac
    done </proc/self/mountinfo
  fi
  [[ -n $SLEEP_FD ]] && { exec {SLEEP_FD}>&-; } 2>/dev/null
  # Only once no acqfs-uring daemon is left: theirs needs the ring to unmount.
  if [[ -n $URING_FOUND ]]; then
    ((${#left[@]})) && echo "$PROG: warning: restoring $URING_PARAM while mounts are left; an io_uring daemon among them may stall" >&2
    uring_restore || status=1
  fi
  if ((${#left[@]})); then
    echo "$PROG: ERROR: could not unmount: ${left[*]}; the work directory $WORK is kept" >&2
    status=1
  elif ((KEEP)); then
    log "kept the work directory $WORK (--keep)"
  elif [[ -n $WORK ]]; then
    [[ -n $RUN_DIR ]] && remove_tree "$RUN_DIR"
    [[ -n $DATA ]] && remove_tree "$DATA"
    ((WORK_CREATED)) && rmdir "$WORK" 2>/dev/null
    log "removed the work data in $WORK"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'echo "$PROG: interrupted (SIGINT); cleaning up" >&2; exit 130' INT
trap 'echo "$PROG: terminated (SIGTERM); cleaning up" >&2; exit 143' TERM
trap 'echo "$PROG: hangup (SIGHUP); cleaning up" >&2; exit 129' HUP
trap 'echo "$PROG: error: line $LINENO: command failed (exit $?): $BASH_COMMAND" >&2' ERR

# ---------------------------------------------------------------- work dir
if [[ -z $WORK ]]; then
  WORK=$(mktemp -d /tmp/acqfs-bench-work.XXXXXX)
  WORK_CREATED=1
else
  [[ -e $WORK ]] || { mkdir -p "$WORK"; WORK_CREATED=1; }
  [[ -d $WORK ]] || die "--work $WORK is not a directory"
fi
WORK=$(realpath "$WORK")
[[ $WORK =~ ^/[A-Za-z0-9._/+@-]+$ ]] || die "--work path '$WORK' may hold only letters, digits and ._/+@- (it goes into mount options)"
mkdir -p "$OUT" || die "cannot create --out $OUT"
OUT=$(realpath "$OUT")
case $OUT/ in "$WORK"/*) die "--out must not be inside the work directory (it is removed at the end)";; esac
DATA="$WORK/acqfs-bench-data"
RUN_DIR="$WORK/acqfs-bench-run.$$"
LOGS="$OUT/logs"
mkdir -p "$DATA" "$RUN_DIR/sb" "$LOGS"
RAW="$OUT/raw.tsv"
: >"$RAW"
TAG="b$$"   # in every sandbox name, so runs never collide

# A fifo opened read-write never delivers data, so `read -t` on it sleeps
# without forking a process.
mkfifo "$RUN_DIR/.sleep"
exec {SLEEP_FD}<>"$RUN_DIR/.sleep"
msleep() { read -r -t "$1" -u "$SLEEP_FD" _ 2>/dev/null || true; }


# ------------------------------------------------------------ measurements
us_to_s() { printf '%d.%06d' $(($1 / 1000000)) $(($1 % 1000000)); }

# timed NAME DIR CMD...: runs CMD in DIR in the background (a signal then
# reaches our trap at once) and sets ELAPSED to its wall time in seconds.
# Output goes to $LOGS/NAME.log; a failure stops the benchmark.
timed() {
  local name=$1 dir=$2
  shift 2
  local tf="$RUN_DIR/.time" lf="$LOGS/$name.log" rc=0 jrc us
  rm -f "$tf"
  (
    trap - ERR INT TERM HUP EXIT
    set +eE
    cd "$dir" || exit 97
    t0=$EPOCHREALTIME
    "$@"
    jrc=$?
    t1=$EPOCHREALTIME
    echo "$jrc $(( ${t1/./} - ${t0/./} ))" >"$tf"
    exit "$jrc"
  ) >"$lf" 2>&1 </dev/null &
  JOB_PID=$!
  wait "$JOB_PID" || rc=$?
  JOB_PID=""
  if ((rc != 0)) || [[ ! -s $tf ]]; then
    echo "$PROG: error: $name: '$*' in $dir failed (exit $rc); the end of $lf:" >&2
    tail -n 15 "$lf" | sed 's/^/    /' >&2
    exit 1
  fi
  read -r jrc us <"$tf"
  ELAPSED=$(us_to_s "$us")
}

record() {  # record METRIC TARGET RUN VALUE
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$RAW"
  log "$1 $2 run $3: $4"
}

settle() { sync; }   # between write workloads, untimed

# ---------------------------------------------------------------- the data
REPO="$DATA/checkout" CPROJ="$DATA/cproject" SMALLTAR="$DATA/small.tar"
FILESDATA="$DATA/files" FIODATA="$DATA/fio"

# make_data NAME PARAMS CMD...: runs CMD (which creates $DATA/NAME) unless
# $DATA/NAME.ok records the same PARAMS, so --work DIR --keep reuses data.
make_data() {
  local name=$1 params=$2
  shift 2
  if [[ -f $DATA/$name.ok && $(<"$DATA/$name.ok") == "$params" && -e $DATA/$name ]]; then
    log "reusing $DATA/$name ($params)"
    return 0
  fi
  rm -f "$DATA/$name.ok"
  remove_tree "$DATA/$name"
  log "generating $DATA/$name ($params)"
  timed "gen-$name" "$DATA" "$@"
  log "generated $name in $ELAPSED s"
  echo "$params" >"$DATA/$name.ok"
}

make_small_tar() {
  bash "$GEN" smallfiles "$DATA/small.d" "$1" && tar -cf "$DATA/small.tar.part" -C "$DATA/small.d" . &&
    mv "$DATA/small.tar.part" "$DATA/small.tar" && rm -rf "$DATA/small.d"
}

# ---------------------------------------------------------------- versions
transport_lines() {  # a line per acqfs column, each after a newline: its transport and -o
  local v=""
  if has_target acqfs; then
    printf '\n%s' "- acqfs column: FUSE over /dev/fuse (the read/writev loop), mounted with $(acqfs_mount_opts acqfs)"
  fi
  if has_target acqfs-uring; then
    if [[ -n $URING_FOUND ]]; then v="$URING_PARAM was $URING_FOUND at the start, set to Y for the run and put back at the end"
    else v="$URING_PARAM was ${URING_AT_START:-?} at the start and left as it was"; fi
    printf '\n%s' "- acqfs-uring column: FUSE over io_uring, mounted with $(acqfs_mount_opts acqfs-uring) ($v)"
  fi
  return 0
}
commas() { local n=$1 r=""; while ((${#n} > 3)); do r=",${n: -3}$r"; n=${n:0:${#n}-3}; done; echo "$n$r"; }
first_line() { "$@" 2>&1 | head -n 1 || true; }
print_header() {
  local fo="" fov=""
  if command -v fuse-overlayfs >/dev/null 2>&1; then
    fo=$(fuse-overlayfs --version 2>&1 | grep -m1 'fuse-overlayfs' || true)
    fov=$(fuse-overlayfs --version 2>&1 | grep -m1 'FUSE library' || true)
  fi
  local ovl=""
  local p
  for p in /sys/module/overlay/parameters/{redirect_dir,index,metacopy,xino_auto}; do
    [[ -r $p ]] && ovl+="${p##*/}=$(<"$p") "
  done
  local mode="full" fs src
  ((QUICK)) && mode="quick"
  fs=$(findmnt -n -o FSTYPE,OPTIONS -T "$WORK" 2>/dev/null | awk '{print $1 " (" $2 ")"}' || true)
  [[ -n $fs ]] || fs=$(stat -f -c %T "$WORK")
  ext4_without_journal && fs+=", without a journal"
  src=$(git -C "$SRC_ROOT" rev-parse --short HEAD 2>/dev/null || echo "?")
  [[ -n $(git -C "$SRC_ROOT" status --porcelain --untracked-files=no 2>/dev/null) ]] && src+=" with uncommitted changes"
  cat <<EOF
# acqfs workload comparison ($mode run, $(date -u '+%Y-%m-%d %H:%M UTC'))

- machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), kernel $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start
- work directory: $WORK, on $fs
- acqfs: $( [[ -x $ACQFS ]] && first_line "$ACQFS" --version || echo "not used") ($ACQFS; this checkout is at $src)${MOUNT_OPTS:+, mounted with -o $MOUNT_OPTS}$(transport_lines)
- fuse-overlayfs: ${fo:-not installed}${fov:+ ($fov)}; $(first_line fusermount3 --version)
- kernel overlayfs module defaults: ${ovl:-unknown}
- $(first_line git --version); $(command -v fio >/dev/null && first_line fio --version || echo "fio not installed"); $(first_line gcc --version); $(first_line make --version); $(first_line tar --version); $(command -v gnuplot >/dev/null && first_line gnuplot --version || echo "gnuplot not installed")
- sizes: checkout of $(commas $N_CHECKOUT) files; $N_CFILES C files; $(commas $N_SMALL) small files; $(commas $N_APPEND) appended files and a $BIG_MIB MiB file; $FIO_SIZE fio file
- $RUNS run(s) per workload (median); workloads $(printf '%s\n' "${!WANT[@]}" | sort | paste -sd, -); targets $(printf '%s\n' "${TARGETS[@]}" | sed 's/^fuse$/fuse-overlayfs/' | paste -sd, -)
EOF
}

# Is the work directory on an ext4 that has no journal? Such an ext4 skips,
# when it allocates an inode, every inode of the group freed in the last
# 60 s (fs/ext4/ialloc.c, recently_deleted: only without a journal), reading
# each one's deletion time; after a target's rm -rf of 30,000 files a create
# then costs up to a millisecond of CPU, and the next target's W5 and W6
# measure the allocator more than the file system under test.
ext4_without_journal() {
  local src dev
  src=$(findmnt -n -o FSTYPE,SOURCE -T "$WORK" 2>/dev/null) || return 1
  [[ $src == ext4\ /dev/* ]] || return 1
  dev=${src##*/}
  [[ -d /proc/fs/ext4/$dev ]] || return 1
  ! compgen -G "/proc/fs/jbd2/$dev-*" >/dev/null
}
if ext4_without_journal && [[ -n ${WANT[W5]:-} || -n ${WANT[W6]:-} ]]; then
  note "the work directory is on ext4 without a journal: creating files soon after many were deleted is slowed by ext4's allocator (up to ~1 ms a file on this disk), so W5 and W6 read the order of the targets; run them with --work on tmpfs or a journaled ext4 (docs/benchmarks.md, \"W5 on an ext4 without a journal\")"
fi

has_target acqfs-uring && uring_enable
HEADER=$(print_header)
printf '%s\n\n' "$HEADER"
START_S=$EPOCHSECONDS

# ---------------------------------------------------------------- workloads
# Targets that live in a sandbox, in mount order when several are mounted at
# once (acqfs and acqfs-uring first: their mounts add a remote to the lower's
# .git/config, which must not change under a mounted kernel overlay).
sandbox_targets() {
  local t
  for t in acqfs acqfs-uring fuse kernel native; do has_target "$t" && echo "$t"; done
  return 0
}
mapfile -t SBT < <(sandbox_targets)
# The same, in the order runs take them.
RUN_T=()
for t in native kernel fuse acqfs acqfs-uring; do has_target "$t" && RUN_T+=("$t"); done
# run_order R: RUN_T turned by R-1 places, so that over the runs each target
# follows each other one. A target that runs after another's deletes can
# find the disk slower for it (see work_fs_note), and a fixed order would
# charge that to the same target every run.
run_order() {
  local n=${#RUN_T[@]} i
  for ((i = 0; i < n; i++)); do echo "${RUN_T[$(((i + $1 - 1) % n))]}"; done
}

w1() {
  local r t
  for ((r = 1; r <= RUNS; r++)); do
    for t in "${TARGETS[@]}"; do
      case $t in
        native) continue ;;
        clone)
          local dst="$RUN_DIR/sb/w1-r$r-clone"
          timed "w1-r$r-clone" "$RUN_DIR" git clone -q --no-hardlinks "$REPO" "$dst"
          record W1.ready clone "$r" "$ELAPSED"
          record W1.disk clone "$r" "$(du -sk "$dst" | awk '{print $1}')"
          ((KEEP)) || remove_tree "$dst" ;;
        *)
          sb_create "$t" "$REPO" ro "w1-r$r"
          record W1.ready "$t" "$r" "$SB_READY"
          record W1.disk "$t" "$r" "$(sb_disk_kib "$SB")"
          sb_destroy "$SB" ;;
      esac
    done
  done
}

git_status() { git status >/dev/null; }

w2() {
  local r t
  has_target native && git -C "$REPO" status >/dev/null   # warm the lower
  for ((r = 1; r <= RUNS; r++)); do
    for t in $(run_order "$r"); do
      sb_create "$t" "$REPO" ro "w2-r$r"
      timed "w2-r$r-$t-first" "$MNT" git_status
      record W2.first "$t" "$r" "$ELAPSED"
      timed "w2-r$r-$t-second" "$MNT" git_status
      record W2.warm "$t" "$r" "$ELAPSED"
      if is_acqfs "$t" || [[ $t == fuse ]]; then
        # The daemon's memory once every entry's attributes were read twice.
        timed "w2-r$r-$t-find" "$MNT" find_ls_twice
        record W2.rss "$t" "$r" "$(awk '/^VmRSS:/ {print $2}' "/proc/${SB_PID[$SB]}/status")"
      fi
      sb_destroy "$SB"
      sb_create "$t" "$REPO" ro "w2d-r$r"
      sleep "$AGENT_DELAY"
      timed "w2-r$r-$t-delayed" "$MNT" git_status
      record W2.delayed "$t" "$r" "$ELAPSED"
      sb_destroy "$SB"
    done
  done
}
find_ls_twice() { find . -ls >/dev/null && find . -ls >/dev/null; }

read_all() { tar -cf - . | wc -c; }

w3() {
  local r t hwm
  declare -A id=() mnt=()
  for t in "${SBT[@]}"; do
    sb_create "$t" "$REPO" ro "w3"
    id[$t]=$SB mnt[$t]=$MNT
    timed "w3-warmup-$t" "$MNT" read_all   # warm cache: one untimed pass
  done
  for ((r = 1; r <= RUNS; r++)); do
    for t in $(run_order "$r"); do
      timed "w3-r$r-$t" "${mnt[$t]}" read_all
      record W3.read "$t" "$r" "$ELAPSED"
    done
  done
  for t in acqfs acqfs-uring; do
    [[ -n ${id[$t]:-} ]] || continue
    hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/${SB_PID[${id[$t]}]}/status")
    record acqfs.VmHWM "$t" 1 "$hwm"
  done
  for ((i = ${#SBT[@]} - 1; i >= 0; i--)); do sb_destroy "${id[${SBT[$i]}]}"; done
}

build() { make -j2 -s && [[ -x build/app ]]; }

w4() {
  local r t
  for ((r = 1; r <= RUNS; r++)); do
    for t in $(run_order "$r"); do
      sb_create "$t" "$CPROJ" copy "w4-r$r"
      settle
      timed "w4-r$r-$t" "$MNT" build
      record W4.make "$t" "$r" "$ELAPSED"
      sb_destroy "$SB"
    done
  done
}

extract() { mkdir x && tar -xf "$SMALLTAR" -C x; }
remove_x() { rm -rf x; }

w5() {
  local r t
  for ((r = 1; r <= RUNS; r++)); do
    for t in $(run_order "$r"); do
      sb_create "$t" "$FILESDATA" empty "w5-r$r"
      settle
      timed "w5-r$r-$t-extract" "$MNT" extract
      record W5.extract "$t" "$r" "$ELAPSED"
      settle
      timed "w5-r$r-$t-rm" "$MNT" remove_x
      record W5.rm "$t" "$r" "$ELAPSED"
      settle
      sb_destroy "$SB"
    done
  done
}

APPEND_FILES=()
for ((i = 0; i < N_APPEND; i++)); do APPEND_FILES+=("$(printf 'files/d%02d/f%04d.txt' $((i / 100)) "$i")"); done
append_all() { local f; for f in "${APPEND_FILES[@]}"; do printf x >>"$f" || return 1; done; }
poke_big() { dd if=/dev/zero of=big.bin bs=1 count=1 conv=notrunc status=none; }

w6() {
  local r t
  for ((r = 1; r <= RUNS; r++)); do
    for t in $(run_order "$r"); do
      sb_create "$t" "$FILESDATA" copy "w6-r$r"
      settle
      timed "w6-r$r-$t-append" "$MNT" append_all
      record W6.append "$t" "$r" "$ELAPSED"
      timed "w6-r$r-$t-big" "$MNT" poke_big
      record W6.big "$t" "$r" "$ELAPSED"
      [[ $(stat -c %s "$MNT/big.bin") -eq $((BIG_MIB * 1048576)) ]] || die "W6: $t changed the size of big.bin"
      settle
      sb_destroy "$SB"
    done
  done
}

warm_file() { cat f.bin >/dev/null; }
FIO_COMMON=(--ioengine=psync --invalidate=0 --minimal --output=fio.out)
fio_seqread() {
  rm -f fio.out
  local loops=$(((1024 + FIO_MIB - 1) / FIO_MIB))
  fio --name=seqread --filename="$1/f.bin" --rw=read --bs=1M --size="${FIO_MIB}M" --loops="$loops" --readonly "${FIO_COMMON[@]}"
}
fio_seqwrite() {
  rm -f fio.out
  fio --name=seqwrite --filename="$1/new.bin" --rw=write --bs=1M --size="${FIO_MIB}M" --fallocate=none "${FIO_COMMON[@]}"
}
fio_randread() {
  rm -f fio.out
  fio --name=randread --filename="$1/f.bin" --rw=randread --bs=4k --size="${FIO_MIB}M" \
    --io_size=256M --randrepeat=1 --readonly "${FIO_COMMON[@]}"
}
fio_mibs() {  # fio_mibs FIELD: bandwidth (KiB/s in fio's terse format) in MiB/s
  awk -F';' -v f="$1" 'END { if (NF < f || $f <= 0) exit 1; printf "%.1f\n", $f / 1024 }' "$RUN_DIR/fio.out"
}

w7() {
  local r t wdir v
  declare -A id=() mnt=()
  mkdir -p "$RUN_DIR/native-w7"
  for t in "${SBT[@]}"; do
    sb_create "$t" "$FIODATA" ro "w7"
    id[$t]=$SB mnt[$t]=$MNT
    timed "w7-warmup-$t" "$MNT" warm_file   # warm cache
  done
  for ((r = 1; r <= RUNS; r++)); do
    for t in $(run_order "$r"); do
      wdir=${mnt[$t]}
      [[ $t == native ]] && wdir="$RUN_DIR/native-w7"
      timed "w7-r$r-$t-seqread" "$RUN_DIR" fio_seqread "${mnt[$t]}"
      v=$(fio_mibs 7) || die "W7: no read bandwidth in fio's output ($LOGS/w7-r$r-$t-seqread.log)"
      record W7.seqread "$t" "$r" "$v"
      timed "w7-r$r-$t-seqwrite" "$RUN_DIR" fio_seqwrite "$wdir"
      v=$(fio_mibs 48) || die "W7: no write bandwidth in fio's output ($LOGS/w7-r$r-$t-seqwrite.log)"
      record W7.seqwrite "$t" "$r" "$v"
      rm -f "$wdir/new.bin"
      settle
      timed "w7-r$r-$t-randread" "$RUN_DIR" fio_randread "${mnt[$t]}"
      v=$(fio_mibs 7) || die "W7: no read bandwidth in fio's output ($LOGS/w7-r$r-$t-randread.log)"
      record W7.randread "$t" "$r" "$v"
    done
  done
  for ((i = ${#SBT[@]} - 1; i >= 0; i--)); do sb_destroy "${id[${SBT[$i]}]}"; done
  remove_tree "$RUN_DIR/native-w7"
}

small_change() {
  printf 'one more line\n' >>mod00/pkg00/sub00/file000.c &&
    printf 'one more line\n' >>mod00/pkg00/sub00/file001.h &&
    printf 'one more line\n' >>mod00/pkg00/sub01/file002.py &&
    mkdir -p agent-notes && printf 'notes\n' >agent-notes/plan.md && printf 'todo\n' >agent-notes/todo.txt
}
commit_change() { git add -A && git commit -q -m x; }

w8() {
  local r t native_sb="" native_dir=""
  if has_target native; then
    sb_create native "$REPO" clone "w8"
    native_sb=$SB native_dir=$MNT
  fi
  for ((r = 1; r <= RUNS; r++)); do
    for t in $(run_order "$r"); do
      if [[ $t == native ]]; then
        MNT=$native_dir
      else
        sb_create "$t" "$REPO" ro "w8-r$r"
      fi
      git -C "$MNT" status >/dev/null   # as an agent would, before committing
      (cd "$MNT" && small_change) || die "W8: could not change files in $MNT"
      timed "w8-r$r-$t-commit" "$MNT" commit_change
      record W8.commit "$t" "$r" "$ELAPSED"
      if is_acqfs "$t"; then
        timed "w8-r$r-$t-export" "$RUN_DIR" "$ACQFS" export "${SB_NAME[$SB]}" --state-dir "${SB_STATE[$SB]}"
        record W8.export "$t" "$r" "$ELAPSED"
      fi
      if [[ $t == native ]]; then
        git -C "$MNT" reset -q --hard HEAD~1
      else
        sb_destroy "$SB"
      fi
    done
  done
  [[ -n $native_sb ]] && sb_destroy "$native_sb"
  return 0
}

# ------------------------------------------------------------ generate, run
# Preflight: mount each overlay once over a tiny directory, so a target that
# cannot work here (options, permissions) fails before any data is made.
preflight() {
  local t lower="$RUN_DIR/preflight-lower"
  mkdir -p "$lower"
  echo ok >"$lower/probe"
  for t in "${SBT[@]}"; do
    [[ $t == native ]] && continue
    sb_create "$t" "$lower" ro preflight
    [[ $(<"$MNT/probe") == ok ]] || die "preflight: $t does not show the lower's files at $MNT"
    echo changed >"$MNT/probe" || die "preflight: cannot write in the $t mount $MNT"
    sb_destroy "$SB"
    [[ $(<"$lower/probe") == ok ]] || die "preflight: $t wrote to its lower directory"
  done
  remove_tree "$lower"
}
preflight

want() { [[ -n ${WANT[$1]:-} ]]; }
if want W1 || want W2 || want W3 || want W8; then
  make_data checkout "files=$N_CHECKOUT v1" bash "$GEN" checkout "$REPO" "$N_CHECKOUT"
fi
want W4 && make_data cproject "files=$N_CFILES v1" bash "$GEN" cproject "$CPROJ" "$N_CFILES"
want W5 && make_data small.tar "files=$N_SMALL v1" make_small_tar "$N_SMALL"
if want W5 || want W6; then
  make_data files "files=$N_APPEND big=$BIG_MIB v1" bash "$GEN" data "$FILESDATA" "$N_APPEND" "$BIG_MIB"
fi
if want W7; then
  make_data fio "mib=$FIO_MIB v1" bash -c 'mkdir -p "$1" && bash "$2" blob "$1/f.bin" "$3"' _ "$FIODATA" "$GEN" "$FIO_MIB"
fi

for w in W1 W2 W3 W4 W5 W6 W7 W8; do
  want "$w" || continue
  if [[ $w == W1 ]] && ! has_target kernel && ! has_target fuse && ! has_acqfs && ! has_target clone; then continue; fi
  log "=== $w"
  "${w,,}"
done
ELAPSED_TOTAL=$((EPOCHSECONDS - START_S))

# ---------------------------------------------------------------- results
# results.tsv: one line per metric and target with the median and every run.
awk -F'\t' '
  { k = $1 "\t" $2; if (k in v) v[k] = v[k] "," $4; else v[k] = $4 }
  END {
    print "metric\ttarget\tmedian\truns\tvalues"
    for (k in v) {
      m = split(v[k], a, ",")
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
      med = (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
      printf "%s\t%s\t%s\t%s\n", k, med, m, v[k] | "sort"
    }
  }' "$RAW" >"$OUT/results.tsv.tmp"
{ head -n 1 "$OUT/results.tsv.tmp"; tail -n +2 "$OUT/results.tsv.tmp" | sort; } >"$OUT/results.tsv"
rm -f "$OUT/results.tsv.tmp"

declare -A MED=()
while IFS=$'\t' read -r m t med _; do
  [[ $m == metric ]] && continue
  MED["$m|$t"]=$med
done <"$OUT/results.tsv"

SEQREAD_TIMES=""
((FIO_MIB < 1024)) && SEQREAD_TIMES=", $(((1024 + FIO_MIB - 1) / FIO_MIB)) times"
METRICS=(
  "W1.ready|W1 workspace ready: mount (or clone) of the $(commas $N_CHECKOUT)-file checkout|s|time"
  "W1.disk|W1 disk used by the new workspace|KiB|size"
  "W2.first|W2 git status, first in a fresh sandbox|s|time"
  "W2.warm|W2 git status, second run|s|time"
  "W2.delayed|W2 git status, first, $AGENT_DELAY s after the mount (an agent starting up)|s|time"
  "W2.rss|W2 daemon VmRSS after find -ls twice over the checkout|KiB|size"
  "W3.read|W3 read every file: tar cf - . (warm)|s|time"
  "W4.make|W4 make -j2, clean build of $N_CFILES .c files|s|time"
  "W5.extract|W5 extract $(commas $N_SMALL) small files (tar x)|s|time"
  "W5.rm|W5 rm -rf of those files|s|time"
  "W6.append|W6 append 1 byte to each of $(commas $N_APPEND) lower files|s|time"
  "W6.big|W6 write 1 byte in place into a $BIG_MIB MiB lower file|s|time"
  "W7.seqread|W7 fio sequential read of a $FIO_SIZE lower file$SEQREAD_TIMES|MiB/s|speed"
  "W7.seqwrite|W7 fio sequential write of a new $FIO_SIZE file|MiB/s|speed"
  "W7.randread|W7 fio 4 KiB random reads (256 MiB) of the $FIO_SIZE file|MiB/s|speed"
  "W8.commit|W8 git add -A && git commit -q of a small change (5 files)|s|time"
  "W8.export|W8 acqfs export of it|s|time"
)

applies() {  # does METRIC apply to TARGET at all?
  local m=$1 t=$2
  case $t in
    clone) [[ $m == W1.* ]] ;;
    native) [[ $m != W1.* && $m != W8.export && $m != W2.rss ]] ;;
    kernel) [[ $m != W8.export && $m != W2.rss ]] ;;
    *) [[ $m != W8.export ]] || is_acqfs "$t" ;;
  esac
}
fmt() {  # fmt UNIT VALUE
  case $1 in
    s) awk -v v="$2" 'BEGIN { printf (v < 10 ? "%.3f" : "%.2f"), v }' ;;
    MiB/s) awk -v v="$2" 'BEGIN { printf "%.0f", v }' ;;
    *) awk -v v="$2" 'BEGIN { printf "%.0f", v }' ;;
  esac
}
ratio() {  # ratio A B: A / B with two decimals
  awk -v a="$1" -v b="$2" 'BEGIN { if (b <= 0) print "n/a"; else printf (a / b >= 100 ? "%.0f" : a / b >= 10 ? "%.1f" : "%.2f"), a / b }'
}
cell() {  # cell METRIC TARGET UNIT
  if ! applies "$1" "$2"; then echo "n/a"
  elif [[ -n ${MED["$1|$2"]:-} ]]; then fmt "$3" "${MED["$1|$2"]}"
  else echo "-"; fi
}
rcell() {  # rcell METRIC A PEER: ratio of target A to PEER
  local m=$1 t=$2 peer=$3 a=${MED["$1|$2"]:-} b=${MED["$1|$3"]:-}
  if ! applies "$m" "$peer" || ! applies "$m" "$t"; then echo "n/a"
  elif [[ -n $a && -n $b ]]; then ratio "$a" "$b"
  else echo "-"; fi
}

# The acqfs columns: one per transport that ran (acqfs alone, as before the
# transports, when neither did), and uring/dev when both ran.
ACQ_COLS=()
has_target acqfs && ACQ_COLS+=(acqfs)
has_target acqfs-uring && ACQ_COLS+=(acqfs-uring)
((${#ACQ_COLS[@]})) || ACQ_COLS=(acqfs)
BOTH_T=0
has_target acqfs && has_target acqfs-uring && BOTH_T=1
declare -A PEER_NAME=([native]=native [kernel]=kernel [fuse]=fuse-overlayfs)

TABLE=$(
  head="| workload | unit | native | kernel overlayfs | fuse-overlayfs |"
  rule="| --- | --- | ---: | ---: | ---: |"
  for a in "${ACQ_COLS[@]}"; do head+=" $a |"; rule+=" ---: |"; done
  head+=" git clone |"; rule+=" ---: |"
  for a in "${ACQ_COLS[@]}"; do
    for peer in native kernel fuse; do head+=" $a/${PEER_NAME[$peer]} |"; rule+=" ---: |"; done
  done
  ((BOTH_T)) && { head+=" uring/dev |"; rule+=" ---: |"; }
  echo "$head"
  echo "$rule"
  for def in "${METRICS[@]}"; do
    IFS='|' read -r m label unit kind <<<"$def"
    want "${m%%.*}" || continue
    row="| $label | $unit | $(cell "$m" native "$unit") | $(cell "$m" kernel "$unit") | $(cell "$m" fuse "$unit") |"
    for a in "${ACQ_COLS[@]}"; do row+=" $(cell "$m" "$a" "$unit") |"; done
    row+=" $(cell "$m" clone "$unit") |"
    for a in "${ACQ_COLS[@]}"; do
      for peer in native kernel fuse; do row+=" $(rcell "$m" "$a" "$peer") |"; done
    done
    ((BOTH_T)) && row+=" $(rcell "$m" acqfs-uring acqfs) |"
    echo "$row"
  done
)

FOOT=()
FOOT+=("Median of $RUNS run(s). Times in seconds: a ratio above 1 means acqfs is slower. W7 is throughput in MiB/s and its ratios are ratios of speeds: below 1 means acqfs is slower. W1 disk is du of the sandbox's upper and work directories (acqfs: its whole sandbox folder, bridge included) or of the clone. n/a: does not apply (native has no workspace to create; export is acqfs's). -: not run.")
FOOT+=("Native disk has no fresh sandbox: its W2 runs are in the checkout itself (so first = second), W4-W6 work in a copy made untimed (W6 changes files in place: no copy-up), W8 in a local clone. Each overlay gets a fresh upper and work directory (acqfs: a fresh state directory) per run, except W3 and W7, which mount every target once and read warm.")
if ((BOTH_T)); then
  FOOT+=("acqfs ran on /dev/fuse (mounted with -o nouring) and acqfs-uring on FUSE over io_uring, the same binary and options otherwise; uring/dev is acqfs-uring's median over acqfs's (times: above 1 means io_uring is slower; W7 speeds: below 1 means io_uring is slower). The acqfs-uring ratios read as acqfs's do.")
fi
for t in "${ACQ_COLS[@]}"; do
  [[ -n ${TRANSPORT_SEEN[$t]:-} ]] && FOOT+=("Transport of every $t mount, as its daemon logged it (checked after each mount): ${TRANSPORT_SEEN[$t]}.")
done
FOOT+=("Writes are buffered (W7 has no fsync) and the lowers are warm in the page cache; rm -rf and the W7 write depend most on the disk's writeback, so they vary most between runs.")
HWM=()
for t in "${ACQ_COLS[@]}"; do
  [[ -n ${MED["acqfs.VmHWM|$t"]:-} ]] || continue
  v=$(awk -v k="${MED["acqfs.VmHWM|$t"]}" 'BEGIN { printf "%.1f MiB", k / 1024 }')
  [[ ${ACQ_COLS[*]} == acqfs ]] || v+=" ($t)"
  HWM+=("$v")
done
if ((${#HWM[@]})); then
  FOOT+=("acqfs daemon peak memory (VmHWM, read before unmounting after W3 on the $(commas $N_CHECKOUT)-file checkout): $(printf '%s\n' "${HWM[@]}" | paste -sd';' - | sed 's/;/; /g').")
elif want W3 && has_acqfs; then
  FOOT+=("acqfs daemon peak memory: not measured.")
else
  FOOT+=("acqfs daemon peak memory: not measured (it is read after W3, which did not run with acqfs).")
fi
for n in "${NOTES[@]}"; do FOOT+=("Note: $n"); done
FOOT+=("Total time: $((ELAPSED_TOTAL / 60)) min $((ELAPSED_TOTAL % 60)) s, data generation included.")

REPORT=$(
  printf '%s\n\n%s\n\n' "$HEADER" "$TABLE"
  for f in "${FOOT[@]}"; do printf -- '- %s\n' "$f"; done
)
printf '%s\n' "$TABLE"
echo
for f in "${FOOT[@]}"; do printf -- '- %s\n' "$f"; done
printf '%s\n' "$REPORT" >"$OUT/report.md"
printf '%s\n' "$TABLE" >"$OUT/table.md"

# ---------------------------------------------------------------- the plot
# plot_ratios TARGET STEM: TARGET's slowdown against each peer, in STEM.dat
# and STEM.svg (one plot per acqfs column).
plot_ratios() {
  local t=$1 stem=$2 def m label unit kind line peer a b who=$1 sub
  {
    echo "# workload, $t slowdown vs native, vs kernel overlayfs, vs fuse-overlayfs"
    for def in "${METRICS[@]}"; do
      IFS='|' read -r m label unit kind <<<"$def"
      want "${m%%.*}" || continue
      [[ $kind == size || $m == W8.export ]] && continue
      line="${m/./-}"
      for peer in native kernel fuse; do
        a=${MED["$m|$t"]:-} b=${MED["$m|$peer"]:-}
        if [[ -n $a && -n $b ]] && applies "$m" "$peer"; then
          if [[ $kind == speed ]]; then line+=" $(awk -v a="$a" -v b="$b" 'BEGIN { print (a > 0 ? b / a : "?") }')"
          else line+=" $(awk -v a="$a" -v b="$b" 'BEGIN { print (b > 0 ? a / b : "?") }')"; fi
        else
          line+=" ?"
        fi
      done
      echo "$line"
    done
  } >"$OUT/$stem.dat"
  sub="$( ((QUICK)) && echo "quick run, " )median of $RUNS, $(date -u +%Y-%m-%d)"
  case $t in
    acqfs) sub+=", acqfs on /dev/fuse ($(acqfs_mount_opts acqfs))" ;;
    acqfs-uring) sub+=", acqfs on FUSE over io_uring${MOUNT_OPTS:+ (-o $MOUNT_OPTS)}" ;;
  esac
  if gnuplot -e "datafile='$OUT/$stem.dat'; outfile='$OUT/$stem.svg'; subtitle='$sub'; who='$who'" "$HERE/plot.gp" \
      >"$LOGS/gnuplot-$stem.log" 2>&1; then
    log "plot: $OUT/$stem.svg"
  else
    echo "$PROG: warning: gnuplot failed (see $LOGS/gnuplot-$stem.log); no plot $stem.svg" >&2
  fi
}
made="report.md, table.md, results.tsv, raw.tsv"
rm -f "$OUT"/ratios.{dat,svg} "$OUT"/ratios-uring.{dat,svg}   # an earlier run's, in the same --out
if ((HAVE_GNUPLOT)); then
  has_target acqfs && plot_ratios acqfs ratios
  has_target acqfs-uring && plot_ratios acqfs-uring ratios-uring
  for f in ratios ratios-uring; do
    [[ -f $OUT/$f.svg ]] && made+=", $f.svg"
  done
fi
log "results in $OUT: $made, logs/"
