#!/usr/bin/env bash
# The soak suite: real projects' own test suites, installers and builds, run
# inside acqfs sandboxes in both file modes and, in the same run, on native
# disk. For each workload and target it reports pass/fail counts, wall time,
# and the daemon's peak descriptors and resident memory (sampled every
# 0.2 s from /proc) against the descriptor bound the daemon logged, and the
# daemon log's warnings. It fails (exit 1) when a target's results differ
# from native, a daemon passed its bound, or a daemon logged a warning.
#
# Everything comes from Debian's packages and the npm registry:
#   python  Python 3.11's own tests of the file system modules
#           (libpython3.11-testsuite), run with -j2, cwd and TMPDIR in the
#           target; results compared test case by test case (JUnit XML).
#   npm     qs@6.14.0 from the npm registry: `npm ci` of its ~480
#           devDependencies (19,000 files, .bin symlinks, executable bits),
#           then its own tape suite under nyc, its eslint run and its
#           browserify build (the bundle's size and what it computes are
#           compared: browserify's module order is not deterministic).
#   cxx     GoogleTest and GoogleMock from /usr/src/googletest (Debian's
#           googletest): configure, build -j2 with their own tests, ctest.
#
# Usage: tests/soak/run.sh --help. Unmounts every sandbox it made and
# removes its data on every exit, Ctrl-C and kill included (not SIGKILL).
set -Eeuo pipefail
export LC_ALL=C
shopt -s nullglob

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC_ROOT=$(cd "$HERE/../.." && pwd)
PROG=soak

usage() {
  cat <<'EOF'
Usage: tests/soak/run.sh [options]

  --quick           reduced suite: the python workload's list of file
                    system modules only (under a minute a target); CI
                    runs this
  --only LIST       workloads among python,npm,cxx (default: all three)
  --targets LIST    among native,acqfs (-o no_open: handle-less),
                    acqfs-handles (-o handles: passthrough as root)
                    (default: all three)
  --acqfs PATH      the acqfs binary (default: build/bin/acqfs here)
  --transport T     the daemon's FUSE transport: dev (-o nouring, the
                    default) or uring (FUSE over io_uring: the run fails
                    unless each daemon says it runs on the ring, which needs
                    /sys/module/fuse/parameters/enable_uring at Y; the
                    script does not set it)
  --out DIR         where results.tsv, summary.md and the logs go
                    (default /tmp/acqfs-soak-<date>)
  --work DIR        where the sources and sandboxes live (default: a new
                    directory under /tmp, removed at the end)
  --keep            keep the work directory
  --host-churn SECONDS
                    while a workload runs in a sandbox, the host's git moves
                    every SECONDS: an empty commit, a switch between two
                    branches of one tree, pack-refs, `git gc --auto`, and
                    `git gc --prune=now` (docs/git-bridge.md, "The base");
                    the sandbox's HEAD must not move with it
  --checkpoint-every SECONDS
                    while a workload runs in a sandbox, take a checkpoint
                    every SECONDS (the agent-harness pattern, docs/stack.md)
                    and squash the stack to its newest 4 frozen layers once
                    it holds 24; a checkpoint or squash that fails fails the
                    run
  -h, --help        this text

Exit status: 0 when every target matched native with its daemon under its
descriptor bound and no daemon warning; 1 otherwise; 2 on a usage error or
a workload that could not be set up.
EOF
}

die() { echo "$PROG: error: $*" >&2; exit 2; }
log() { printf '%s [%(%H:%M:%S)T] %s\n' "$PROG" -1 "$*" >&2; }

# The host's git (checkout $1) moves every $HOST_CHURN seconds while process
# $2 runs: commits, branch switches between two branches of one tree (the
# working tree stays as it is), pack-refs, gc; one line per step in $3.
host_churn_loop() {
  local host=$1 job=$2 out=$3 n=0 g=(git -C "$1" -c user.name=host -c user.email=host@localhost)
  : >"$out"
  # (The host may be on churn-b already, from an earlier target's loop.)
  { "${g[@]}" checkout -q -B churn-a && "${g[@]}" branch -f churn-b HEAD; } \
    >>"$out.log" 2>&1 || echo "FAILED branches" >>"$out"
  while kill -0 "$job" 2>/dev/null; do
    sleep "$HOST_CHURN"
    n=$((n + 1))
    local b=churn-a
    (( n % 2 )) && b=churn-b
    if { "${g[@]}" commit -q --allow-empty -m "host churn $n" &&
      "${g[@]}" checkout -q -B "$b" &&
      { (( n % 5 )) || "${g[@]}" pack-refs --all; } &&
      { (( n % 3 )) || "${g[@]}" gc -q --auto; } &&
      { (( n % 7 )) || "${g[@]}" gc -q --prune=now; }; } >>"$out.log" 2>&1; then
      echo "moved $n" >>"$out"
    else
      echo "FAILED host move $n" >>"$out"
    fi
  done
}

# Checkpoints sandbox $1 every $CHECKPOINT_EVERY seconds while process $2
# runs, squashing to 4 frozen layers at 24; one line per step in $3.
checkpoint_loop() {
  local name=$1 job=$2 out=$3 n=0
  : >"$out"
  while kill -0 "$job" 2>/dev/null; do
    sleep "$CHECKPOINT_EVERY"
    kill -0 "$job" 2>/dev/null || break
    if "$ACQFS" checkpoint "$name" --state-dir "$STATE" -m "soak $n" >>"$out.log" 2>&1; then
      echo "checkpoint $n" >>"$out"
    else
      echo "FAILED checkpoint $n: $(tail -n1 "$out.log")" >>"$out"
    fi
    n=$((n + 1))
    local frozen
    frozen=$(grep -o '"\.layers/[0-9a-f]*"' "$STATE/$name/stack.json" | sort -u | wc -l)
    if (( frozen >= 25 )); then
      if "$ACQFS" squash "$name" --keep 4 --state-dir "$STATE" >>"$out.log" 2>&1; then
        echo "squash $n" >>"$out"
      else
        echo "FAILED squash $n: $(tail -n1 "$out.log")" >>"$out"
      fi
    fi
  done
}

QUICK=0 KEEP=0 ONLY="" TARGETS="native,acqfs,acqfs-handles" CHECKPOINT_EVERY="" HOST_CHURN=""
TRANSPORT=dev
ACQFS="$SRC_ROOT/build/bin/acqfs" OUT="" WORK=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) QUICK=1; shift ;;
    --only) [[ $# -ge 2 ]] || die "--only needs a value"; ONLY=$2; shift 2 ;;
    --targets) [[ $# -ge 2 ]] || die "--targets needs a value"; TARGETS=$2; shift 2 ;;
    --acqfs) [[ $# -ge 2 ]] || die "--acqfs needs a value"; ACQFS=$2; shift 2 ;;
    --transport) [[ $# -ge 2 ]] || die "--transport needs a value"; TRANSPORT=$2; shift 2 ;;
    --out) [[ $# -ge 2 ]] || die "--out needs a value"; OUT=$2; shift 2 ;;
    --work) [[ $# -ge 2 ]] || die "--work needs a value"; WORK=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --checkpoint-every) [[ $# -ge 2 ]] || die "--checkpoint-every needs a value"; CHECKPOINT_EVERY=$2; shift 2 ;;
    --host-churn) [[ $# -ge 2 ]] || die "--host-churn needs a value"; HOST_CHURN=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ -n $ONLY ]] || { ((QUICK)) && ONLY=python || ONLY=python,npm,cxx; }
IFS=, read -r -a WORKLOADS <<<"$ONLY"
IFS=, read -r -a TARGET_LIST <<<"$TARGETS"
for w in "${WORKLOADS[@]}"; do
  case $w in python|npm|cxx) ;; *) die "unknown workload '$w' (python, npm, cxx)" ;; esac
done
for t in "${TARGET_LIST[@]}"; do
  case $t in native|acqfs|acqfs-handles) ;; *) die "unknown target '$t' (native, acqfs, acqfs-handles)" ;; esac
done
[[ " ${TARGET_LIST[*]} " == *" native "* ]] || die "--targets must include native (the results are compared with it)"
case $TRANSPORT in dev|uring) ;; *) die "unknown transport '$TRANSPORT' (dev, uring)" ;; esac
[[ -x $ACQFS ]] || die "no acqfs binary at $ACQFS (build first, or pass --acqfs)"
ACQFS=$(realpath "$ACQFS")
[[ -n $OUT ]] || OUT="/tmp/acqfs-soak-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$OUT/logs" || die "cannot create --out $OUT"
OUT=$(realpath "$OUT")
LOGS="$OUT/logs"

# ------------------------------------------------------------- work, cleanup
WORK_CREATED=0
if [[ -z $WORK ]]; then
  WORK=$(mktemp -d /tmp/acqfs-soak-work.XXXXXX)
  WORK_CREATED=1
fi
mkdir -p "$WORK"
WORK=$(realpath "$WORK")
case $OUT/ in "$WORK"/*) die "--out must not be inside the work directory";; esac
STATE="$WORK/state"
mkdir -p "$STATE"
MOUNTS=()     # mount points of sandboxes this run made
JOB_PID=""
MON_PID=""

is_mounted() {
  local _a _b _c _d mp _rest
  while read -r _a _b _c _d mp _rest; do
    [[ $mp == "$1" ]] && return 0
  done </proc/self/mountinfo
  return 1
}

unmount_all() {
  local mp name
  for mp in "${MOUNTS[@]}"; do
    is_mounted "$mp" || continue
    name=$(basename "$mp")
    timeout 120 "$ACQFS" umount "$name" --state-dir "$STATE" --no-export >>"$LOGS/umount.log" 2>&1 ||
      fusermount3 -u -z "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || true
  done
}

CLEANED=0
cleanup() {
  local status=$?
  ((CLEANED)) && return 0
  CLEANED=1
  trap '' INT TERM HUP
  set +eEu
  [[ -n $JOB_PID ]] && { pkill -TERM -P "$JOB_PID" 2>/dev/null; kill -TERM "$JOB_PID" 2>/dev/null; wait "$JOB_PID" 2>/dev/null; }
  [[ -n $MON_PID ]] && { kill "$MON_PID" 2>/dev/null; wait "$MON_PID" 2>/dev/null; }
  unmount_all
  local mp left=""
  for mp in "${MOUNTS[@]}"; do is_mounted "$mp" && left+=" $mp"; done
  if [[ -n $left ]]; then
    echo "$PROG: ERROR: could not unmount:$left; keeping $WORK" >&2
    status=1
  elif ((KEEP)); then
    log "kept $WORK"
  else
    chmod -R u+rwx "$WORK" 2>/dev/null
    rm -rf --one-file-system "$WORK"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'echo "$PROG: interrupted; cleaning up" >&2; exit 130' INT
trap 'echo "$PROG: terminated; cleaning up" >&2; exit 143' TERM
trap 'echo "$PROG: hangup; cleaning up" >&2; exit 129' HUP

# ------------------------------------------------------------ the workloads
PY=/usr/bin/python3.11
# The reduced list (CI) is the file system modules; the full one adds more
# of what a build or a package manager does to files.
PY_QUICK=(test_os test_shutil test_tempfile test_pathlib test_glob test_posix
          test_fileio test_io test_mmap test_tarfile test_zipfile
          test_compileall test_filecmp test_stat)
PY_FULL=("${PY_QUICK[@]}" test_fnmatch test_genericpath test_posixpath
         test_fileinput test_file test_linecache test_py_compile test_shelve
         test_dbm_dumb test_sqlite3 test_logging test_subprocess
         test_importlib test_zipimport test_mailbox test_gzip test_bz2
         test_lzma)
NPM_PKG=qs@6.14.0

# The source each workload starts from, committed in a git repository (the
# sandboxes' lower), made once per run under $WORK/src/<workload>.
prepare() {
  local w=$1 src="$WORK/src/$1"
  mkdir -p "$src"
  case $w in
    python)
      [[ -x $PY && -d /usr/lib/python3.11/test ]] ||
        die "python needs Debian's python3.11 and libpython3.11-testsuite (scripts/install-deps.sh)"
      echo "soak: Python's own tests run here" >"$src/README" ;;
    npm)
      command -v npm >/dev/null || die "npm needs Node.js and npm (not installed)"
      ( cd "$WORK" && npm pack "$NPM_PKG" --silent >"$LOGS/npm-pack.log" 2>&1 ) ||
        die "npm pack $NPM_PKG failed: $(tail -n 3 "$LOGS/npm-pack.log")"
      tar -xzf "$WORK"/qs-*.tgz -C "$src" --strip-components=1
      # evalmd (the README check) depends on a GitHub tarball, out of reach.
      ( cd "$src" && npm pkg delete devDependencies.evalmd &&
        npm install --package-lock-only --ignore-scripts --no-audit --no-fund \
          >"$LOGS/npm-lock.log" 2>&1 ) ||
        die "npm could not resolve $NPM_PKG's dependencies: $(tail -n 3 "$LOGS/npm-lock.log")" ;;
    cxx)
      [[ -f /usr/src/googletest/CMakeLists.txt ]] ||
        die "cxx needs Debian's googletest package (/usr/src/googletest)"
      cp -a /usr/src/googletest/. "$src/" ;;
  esac
  git -C "$src" init -q
  git -C "$src" add -A
  git -C "$src" -c user.name=soak -c user.email=soak@localhost commit -qm "$w sources"
}

# run_workload W DIR LOG: runs workload W in DIR; writes key=value results
# (pass, fail, detail) to DIR/.soak-result; returns 0 unless it could not run.
run_workload() {
  local w=$1 dir=$2 res="$2/.soak-result"
  case $w in
    python)
      mkdir -p "$dir/tmp"
      local tests=("${PY_QUICK[@]}")
      ((QUICK)) || tests=("${PY_FULL[@]}")
      ( cd "$dir" && TMPDIR="$dir/tmp" HOME="$dir" "$PY" -m test -j2 \
          --junit-xml "$dir/junit.xml" "${tests[@]}" ) || true
      "$PY" - "$dir/junit.xml" "$res" <<'EOF'
import sys, xml.etree.ElementTree as ET
cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
passed, failed, skipped = 0, [], 0
for c in cases:
    name = c.get("classname", "") + "." + c.get("name", "")
    if c.find("failure") is not None or c.find("error") is not None:
        failed.append(name)
    elif c.find("skipped") is not None:
        skipped += 1
    else:
        passed += 1
with open(sys.argv[2], "w") as out:
    out.write(f"pass={passed}\nfail={len(failed)}\nskip={skipped}\n")
    out.write("detail=" + ",".join(sorted(failed)) + "\n")
EOF
      ;;
    npm)
      local ci=0 lint=0 dist=0 tp tf sum
      ( cd "$dir" && npm ci --no-audit --no-fund ) || ci=$?
      ( cd "$dir" && npx --no-install nyc tape 'test/**/*.js' ) >"$dir/.tape.out" 2>&1 || true
      cat "$dir/.tape.out"
      ( cd "$dir" && npx --no-install eslint --ext=js,mjs . ) || lint=$?
      ( cd "$dir" && npm run dist ) || dist=$?
      tp=$(awk '/^# pass/{print $3}' "$dir/.tape.out" | tail -n1)
      tf=$(awk '/^# fail/{print $3}' "$dir/.tape.out" | tail -n1)
      # browserify numbers modules in the order reads complete, so the
      # bundle differs run to run even on one disk: compare its size and
      # what it computes instead.
      sum=$(stat -c %s "$dir/dist/qs.js" 2>/dev/null || echo none)
      sum+=/$( cd "$dir" && node -e "const Qs = require('./dist/qs.js');
        process.stdout.write(Qs.stringify({a: [1, 2], b: {c: 'd e'}}) + ' ' +
          JSON.stringify(Qs.parse('x[y]=1&x[z]=2')))" 2>/dev/null | sha256sum | cut -c1-12)
      printf 'pass=%s\nfail=%s\nskip=0\ndetail=ci:%s lint:%s dist:%s bundle:%s\n' \
        "${tp:-0}" "${tf:-0}" "$ci" "$lint" "$dist" "${sum:-none}" >"$res" ;;
    cxx)
      local conf=0 build=0 line
      ( cd "$dir" && cmake -S . -B build -Dgtest_build_tests=ON -Dgmock_build_tests=ON ) || conf=$?
      ( cd "$dir" && cmake --build build -j2 ) || build=$?
      ( cd "$dir/build" && ctest -j2 --timeout 300 ) >"$dir/.ctest.out" 2>&1 || true
      cat "$dir/.ctest.out"
      line=$(grep -E 'tests passed, [0-9]+ tests failed out of' "$dir/.ctest.out" | tail -n1)
      local total failed
      total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
      failed=$(sed -E 's/.*, ([0-9]+) tests failed.*/\1/' <<<"$line")
      printf 'pass=%s\nfail=%s\nskip=0\ndetail=configure:%s build:%s failed:%s\n' \
        "$(( ${total:-0} - ${failed:-0} ))" "${failed:-?}" "$conf" "$build" \
        "$(grep -E '^\s+[0-9]+ - ' "$dir/.ctest.out" | awk '{print $3}' | sort | tr '\n' ',')" >"$res" ;;
  esac
}

# ------------------------------------------------------------ one target
# Samples a daemon's descriptors and VmHWM every 0.2 s into $2.
monitor() {
  local pid=$1 out=$2 n h
  while [[ -d /proc/$pid ]]; do
    n=$(ls /proc/"$pid"/fd 2>/dev/null | wc -l)
    h=$(awk '/^VmHWM/{print $2}' /proc/"$pid"/status 2>/dev/null)
    echo "$n ${h:-0}" >>"$out"
    sleep 0.2
  done
}

RESULTS="$OUT/results.tsv"
printf 'workload\ttarget\tpass\tfail\tskip\tseconds\tpeak_fds\tbound\tvmhwm_kib\twarnings\tdetail\n' >"$RESULTS"
FAILED=0

# Dies unless the daemon whose log is $1 says it runs on $TRANSPORT (its
# "fuse transport:" line comes once the ring's entries are registered).
check_transport() {
  local log=$1 what=$2 line="" i
  for ((i = 0; i < 100; i++)); do
    line=$(grep -m1 'fuse transport: ' "$log" || true)
    [[ -n $line ]] && break
    sleep 0.05
  done
  case $TRANSPORT in
    dev) [[ $line == *"fuse transport: /dev/fuse"* ]] ;;
    uring) [[ $line == *"fuse transport: io_uring"* ]] ;;
  esac || die "$what: the daemon does not run on the $TRANSPORT transport: ${line:-no 'fuse transport' line in $log}"
}

run_target() {
  local w=$1 t=$2 dir mnt="" name pid="" bound="" opts=() t0 t1 secs
  local lf="$LOGS/$w-$t.log" samples="$LOGS/$w-$t.fds"
  name="soak-$w-${t//acqfs-/}-$$"
  : >"$samples"
  if [[ $t == native ]]; then
    dir="$WORK/native-$w"
    cp -a "$WORK/src/$w" "$dir"
  else
    mnt="$WORK/mnt/$name"
    mkdir -p "$mnt"
    # Both file modes by name: the default is one of them, handles where
    # the daemon can pass opens through (root), handle-less elsewhere.
    if [[ $t == acqfs-handles ]]; then opts=(-o handles); else opts=(-o no_open); fi
    [[ $TRANSPORT == dev ]] && opts+=(-o nouring)
    MOUNTS+=("$mnt")
    "$ACQFS" mount "$WORK/src/$w" "$mnt" --name "$name" --state-dir "$STATE" "${opts[@]}" \
      >>"$lf" 2>&1 || die "acqfs mount for $w/$t failed: $(tail -n 3 "$lf")"
    dir=$mnt
    check_transport "$STATE/$name/daemon.log" "$w/$t"
    pid=$(head -n1 "$STATE/$name/daemon.pid" | cut -d' ' -f1)
    bound=$(grep -oE 'bound [0-9]+' "$STATE/$name/daemon.log" | head -n1 | cut -d' ' -f2)
    monitor "$pid" "$samples" &
    MON_PID=$!
  fi
  log "$w on $t: running in $dir"
  t0=$EPOCHREALTIME
  run_workload "$w" "$dir" >>"$lf" 2>&1 &
  JOB_PID=$!
  local cp_pid="" churn_pid="" head0=""
  if [[ -n $mnt && -n $HOST_CHURN ]]; then
    head0=$(git -C "$dir" rev-parse HEAD)
    host_churn_loop "$WORK/src/$w" "$JOB_PID" "$LOGS/$w-$t.churn" &
    churn_pid=$!
  fi
  if [[ -n $mnt && -n $CHECKPOINT_EVERY ]]; then
    checkpoint_loop "$name" "$JOB_PID" "$LOGS/$w-$t.checkpoints" &
    cp_pid=$!
  fi
  wait "$JOB_PID" || true
  JOB_PID=""
  if [[ -n $churn_pid ]]; then
    wait "$churn_pid" || true
    if grep -q '^FAILED' "$LOGS/$w-$t.churn"; then
      echo "$PROG: $w on $t: the host's git failed to move: $(tail -n 2 "$LOGS/$w-$t.churn.log")" >&2
      FAILED=1
    fi
    if [[ $(git -C "$dir" rev-parse HEAD) != "$head0" ]]; then
      echo "$PROG: $w on $t: the sandbox's HEAD moved with the host's" >&2
      FAILED=1
    fi
    log "$w on $t: the host's git moved $(grep -c '^moved' "$LOGS/$w-$t.churn") times"
  fi
  if [[ -n $cp_pid ]]; then
    wait "$cp_pid" || true
    if grep -q '^FAILED' "$LOGS/$w-$t.checkpoints"; then
      echo "$PROG: $w on $t: a checkpoint or squash failed: $(grep '^FAILED' "$LOGS/$w-$t.checkpoints" | head -n1)" >&2
      FAILED=1
    fi
    log "$w on $t: $(grep -c '^checkpoint' "$LOGS/$w-$t.checkpoints") checkpoints, $(grep -c '^squash' "$LOGS/$w-$t.checkpoints") squashes"
  fi
  t1=$EPOCHREALTIME
  secs=$(awk -v a="${t0/./}" -v b="${t1/./}" 'BEGIN{printf "%.1f", (b-a)/1e6}')
  # The result is read before the sandbox is unmounted.
  cp "$dir/.soak-result" "$LOGS/$w-$t.result" 2>/dev/null || rm -f "$LOGS/$w-$t.result"
  local peak=- hwm=- warnings=-
  if [[ -n $mnt ]]; then
    local final_fds final_hwm
    final_fds=$(ls /proc/"$pid"/fd 2>/dev/null | wc -l)
    final_hwm=$(awk '/^VmHWM/{print $2}' /proc/"$pid"/status 2>/dev/null)
    echo "$final_fds ${final_hwm:-0}" >>"$samples"
    kill "$MON_PID" 2>/dev/null || true
    wait "$MON_PID" 2>/dev/null || true
    MON_PID=""
    peak=$(sort -n "$samples" | tail -n1 | cut -d' ' -f1)
    hwm=$(awk '{ if ($2 > m) m = $2 } END { print m + 0 }' "$samples")
    cp "$STATE/$name/daemon.log" "$LOGS/$w-$t.daemon.log"
    warnings=$(grep -cE '\[(warning|error)\]' "$LOGS/$w-$t.daemon.log" || true)
    # A workload's stragglers may still hold the mount for a moment (Python's
    # test_subprocess leaves a `sleep 3` behind, its working directory in
    # the mount): a busy mount is retried for up to 30 s, as a user would
    # wait for them; any other failure fails the run.
    local tries=0
    until timeout 120 "$ACQFS" umount "$name" --state-dir "$STATE" --no-export >>"$lf" 2>&1; do
      if ((++tries < 30)) && tail -n 1 "$lf" | grep -q 'Device or resource busy'; then
        sleep 1
        continue
      fi
      echo "$PROG: acqfs umount $name failed" >&2
      FAILED=1
      tries=-1
      break
    done
    ((tries <= 0)) || log "$w on $t: the mount was busy; unmounted after $tries retries"
  fi
  local pass fail skip detail
  local rf="$LOGS/$w-$t.result"
  if [[ -f $rf ]]; then
    pass=$(sed -n 's/^pass=//p' "$rf")
    fail=$(sed -n 's/^fail=//p' "$rf")
    skip=$(sed -n 's/^skip=//p' "$rf")
    detail=$(sed -n 's/^detail=//p' "$rf")
  else
    pass=0 fail=? skip=0 detail="no result (see $lf)"
  fi
  [[ -z $mnt ]] || { [[ -d $mnt ]] && rm -rf "$STATE/$name"; }
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$w" "$t" "$pass" "$fail" \
    "$skip" "$secs" "$peak" "${bound:--}" "$hwm" "$warnings" "$detail" >>"$RESULTS"
  log "$w on $t: $pass passed, $fail failed, ${secs}s, peak fds $peak (bound ${bound:--}), VmHWM $hwm KiB, $warnings warnings"
}

for w in "${WORKLOADS[@]}"; do
  log "preparing $w"
  prepare "$w"
  for t in "${TARGET_LIST[@]}"; do run_target "$w" "$t"; done
done

# ------------------------------------------------------------ verdict
# Each acqfs target must match native: the same counts and the same detail
# (failing tests, exit codes, bundle hash), peak fds under the bound, and
# no daemon warning.
{
  echo "| workload | target | passed | failed | skipped | seconds | peak fds / bound | VmHWM MiB | warnings |"
  echo "|---|---|--:|--:|--:|--:|--:|--:|--:|"
  tail -n +2 "$RESULTS" | while IFS=$'\t' read -r w t p f s secs peak bound hwm warn detail; do
    mib=-
    [[ $hwm == - ]] || mib=$(awk -v k="$hwm" 'BEGIN{printf "%.1f", k/1024}')
    fb=-
    [[ $peak == - ]] || fb="$peak / $bound"
    echo "| $w | $t | $p | $f | $s | $secs | $fb | $mib | $warn |"
  done
} >"$OUT/summary.md"
while IFS=$'\t' read -r w t p f s secs peak bound hwm warn detail; do
  [[ $t == native || $w == workload ]] && continue
  IFS=$'\t' read -r _ _ np nf ns _ _ _ _ _ ndetail < <(awk -F'\t' -v w="$w" '$1 == w && $2 == "native"' "$RESULTS")
  if [[ $p != "$np" || $f != "$nf" || $s != "$ns" || $detail != "$ndetail" ]]; then
    echo "$PROG: MISMATCH $w on $t: $p passed/$f failed/$s skipped ($detail) against native $np/$nf/$ns ($ndetail)" >&2
    FAILED=1
  fi
  if [[ $peak != - && $bound != - && $peak -gt $bound ]]; then
    echo "$PROG: OVER BOUND $w on $t: the daemon held $peak descriptors, bound $bound" >&2
    FAILED=1
  fi
  if [[ $warn != - && $warn != 0 ]]; then
    echo "$PROG: WARNINGS $w on $t: $warn in $LOGS/$w-$t.daemon.log:" >&2
    grep -E '\[(warning|error)\]' "$LOGS/$w-$t.daemon.log" | head -n 5 | sed 's/^/    /' >&2
    FAILED=1
  fi
done <"$RESULTS"
cat "$OUT/summary.md"
echo "$PROG: results in $OUT (results.tsv, summary.md, logs/)"
((FAILED == 0)) && echo "$PROG: every target matched native" || echo "$PROG: FAILED"
exit "$FAILED"
