#!/bin/bash
# CTest FIXTURES_CLEANUP step for the acqfs mount tests.
#
# Unmounts every mount left below /tmp/acqfs-test-* (fuse.acqfs mounts of
# crashed or timed-out tests, kernel overlayfs oracles, bind mounts), deepest
# first, then SIGKILLs the acqfs daemons whose daemon.pid files live there.
# A root /tmp/acqfs-test-<pid>-* whose test process <pid> is still alive
# belongs to another test run on this machine and is left alone.
# Prints what it cleaned. Exits 0 when nothing is left behind, 1 when a mount
# or daemon survived.
set -u

readonly ROOT_PREFIX=/tmp/acqfs-test-

# Is the test root holding `path` owned by a live process other than us?
live_root() {
  local rest=${1#"$ROOT_PREFIX"} pid
  pid=${rest%%-*}
  [[ $pid =~ ^[0-9]+$ && $pid != "$$" && -d /proc/$pid ]]
}

# Mount points at or below the prefix, deepest first, one per line.
leftover_mounts() {
  local mp
  awk -v prefix="$ROOT_PREFIX" '
    {
      mp = $5
      gsub(/\\040/, " ", mp); gsub(/\\011/, "\t", mp); gsub(/\\134/, "\\", mp)
      if (index(mp, prefix) == 1) print length(mp) "\t" mp
    }' /proc/self/mountinfo | sort -rn -k1,1 | cut -f2- | uniq |
    while IFS= read -r mp; do
      live_root "$mp" || printf '%s\n' "$mp"
    done
}

fs_type_of() {
  findmnt -n -o FSTYPE --mountpoint "$1" 2>/dev/null | tail -n 1
}

is_mounted() {
  findmnt -n --mountpoint "$1" >/dev/null 2>&1
}

unmount_one() {
  local mp=$1 type
  type=$(fs_type_of "$mp")
  echo "cleanup_mounts: unmounting leftover ${type:-?} mount $mp"
  if [[ $type == fuse* ]]; then
    fusermount3 -u -z "$mp" 2>/dev/null
  fi
  local tries=0
  while is_mounted "$mp" && ((tries < 5)); do
    umount -l "$mp" 2>/dev/null
    tries=$((tries + 1))
  done
}

# Kills the daemon of one pid file if it is alive and looks like acqfs.
kill_daemon() {
  local pid_file=$1 pid argv0
  pid=$(head -n 1 "$pid_file" 2>/dev/null | tr -dc '0-9')
  [[ -n $pid && -d /proc/$pid ]] || return 0
  argv0=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n 1)
  [[ $argv0 == *acqfs* ]] || return 0
  echo "cleanup_mounts: killing leftover daemon $pid ($pid_file)"
  kill -9 "$pid" 2>/dev/null
  for _ in $(seq 50); do
    [[ -d /proc/$pid ]] || return 0
    grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null && return 0
    sleep 0.1
  done
}

main() {
  local mp pid_file failed=0
  while IFS= read -r mp; do
    [[ -n $mp ]] && unmount_one "$mp"
  done < <(leftover_mounts)

  local roots=("$ROOT_PREFIX"*)
  if [[ -e ${roots[0]} ]]; then
    while IFS= read -r -d '' pid_file; do
      live_root "$pid_file" && continue
      kill_daemon "$pid_file"
    done < <(find "${roots[@]}" -xdev -maxdepth 4 -name daemon.pid -print0 \
               2>/dev/null)
  fi

  while IFS= read -r mp; do
    [[ -n $mp ]] || continue
    echo "cleanup_mounts: still mounted: $mp" >&2
    failed=1
  done < <(leftover_mounts)
  if ((failed)); then
    echo "cleanup_mounts: leftover mounts remain" >&2
    return 1
  fi
  echo "cleanup_mounts: no acqfs test mounts left"
}

main "$@"
