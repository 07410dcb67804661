#!/usr/bin/env bash
# The main job in one minute: mounts this checkout as the read-only lower of a
# sandbox at /tmp/acqfs-demo (or $1), lists it, changes it, shows the change
# (acqfs status, diff, ls) and that the checkout itself did not change,
# unmounts (which exports the sandbox's work to its bridge repository), shows
# what `git fetch sandbox-demo` would bring, and removes the sandbox and its
# remote. Exits non-zero if the checkout changed. Set ACQFS to use another
# binary, KEEP_STATE=1 to keep the layers.
set -euo pipefail
cd "$(dirname "$0")/.."

lower=$PWD
acqfs=${ACQFS:-$PWD/build/bin/acqfs}
mnt=${1:-/tmp/acqfs-demo}
name=demo

if [[ ! -x $acqfs ]]; then
  echo "demo: $acqfs not found; build first (cmake --build build)" >&2
  exit 1
fi
if mountpoint -q "$mnt" 2>/dev/null; then
  echo "demo: $mnt is already a mount point; unmount it first" >&2
  exit 1
fi
mkdir -p "$mnt"
state=$(mktemp -d /tmp/acqfs-demo-state.XXXXXX)

# Names, types, sizes, modes, owners, mtimes and ctimes of the whole checkout
# (.git included), plus the bytes of README.md.
fingerprint() {
  { find "$lower" -printf '%P\t%y\t%s\t%m\t%U:%G\t%T@\t%C@\n' | LC_ALL=C sort
    sha256sum "$lower/README.md"; } | sha256sum | cut -d' ' -f1
}

mounted=0
created=0
cleanup() {
  if [[ $mounted -eq 1 ]]; then
    "$acqfs" umount "$mnt" --state-dir "$state" --no-export ||
      fusermount3 -u "$mnt" || true
  fi
  # Removes the sandbox and the sandbox-demo remote it added to this checkout.
  if [[ $created -eq 1 && -z "${KEEP_STATE:-}" ]]; then
    "$acqfs" rm "$name" --state-dir "$state" --force 2>/dev/null || true
  fi
  [[ -n "${KEEP_STATE:-}" ]] || rm -rf "$state"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "acqfs mount $lower $mnt --name $name --state-dir $state"
"$acqfs" mount "$lower" "$mnt" --name "$name" --state-dir "$state"
mounted=1
created=1
echo "the checkout now has the remote sandbox-$name (the mount's one write to it):"
git -C "$lower" remote get-url "sandbox-$name" 2>/dev/null || echo "(not a git checkout)"

# From here on, nothing may change the checkout.
before=$(fingerprint)

step "ls -la $mnt  (the checkout, seen through the sandbox)"
ls -la "$mnt"

step "change the sandbox: new file, edit README.md, delete .gitignore"
echo "written inside the sandbox" >"$mnt/SANDBOX-NOTE.txt"
echo "<!-- edited inside the sandbox -->" >>"$mnt/README.md"
rm -f "$mnt/.gitignore"
echo "sandbox README.md ends with:  $(tail -n 1 "$mnt/README.md")"
echo "sandbox SANDBOX-NOTE.txt:     $(cat "$mnt/SANDBOX-NOTE.txt")"
if [[ -e $mnt/.gitignore ]]; then echo "sandbox .gitignore:          present (BUG)"
else echo "sandbox .gitignore:          gone"; fi

step "the checkout itself"
echo "checkout README.md ends with: $(tail -n 1 "$lower/README.md")"
if [[ -e $lower/SANDBOX-NOTE.txt ]]; then echo "checkout SANDBOX-NOTE.txt:    present (BUG)"
else echo "checkout SANDBOX-NOTE.txt:    absent"; fi
if [[ -e $lower/.gitignore ]]; then echo "checkout .gitignore:          present"
else echo "checkout .gitignore:          absent"; fi

# The upper layer is the one the sandbox's stack names (docs/stack.md).
upper_ref=$(grep -o '"upper": *"[^"]*"' "$state/$name/stack.json" | sed 's/.*: *"//; s/"$//')
step "the upper layer ($state/$upper_ref): only the changes"
(cd "$state/$upper_ref" && find . -mindepth 1 -printf '%y %m %s\t%P\n' | sort -k4)
echo "(type c with size 0 = whiteout: a deleted lower name)"

step "acqfs status $name  (what the sandbox changed, from the upper layer alone)"
"$acqfs" status "$name" --state-dir "$state"

step "acqfs diff $name README.md SANDBOX-NOTE.txt"
"$acqfs" diff "$name" README.md SANDBOX-NOTE.txt --state-dir "$state"

step "acqfs checkpoint $name  (freezes the state, mounted, in O(1))"
"$acqfs" checkpoint "$name" -m "after the demo's edits" --state-dir "$state"
"$acqfs" checkpoints "$name" --state-dir "$state"

step "acqfs ls"
"$acqfs" ls --state-dir "$state"

step "acqfs umount $mnt  (unmounts, then exports the sandbox's work)"
"$acqfs" umount "$mnt" --state-dir "$state"
mounted=0

step "what git fetch sandbox-$name would bring (git ls-remote, reads only)"
git -C "$lower" ls-remote "sandbox-$name" 2>/dev/null || true

after=$(fingerprint)
step "checkout fingerprint before: $before"
echo "   checkout fingerprint after:  $after"
if [[ $before != "$after" ]]; then
  echo "demo: FAILED: the checkout changed" >&2
  exit 1
fi
echo "demo: the checkout is unchanged"
