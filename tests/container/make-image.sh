#!/usr/bin/env bash
# Builds the tiny local image the container tests run, from files on this
# machine only (no registry is reachable, none is asked): busybox-static for
# the shell and the tools, the host's git and make with the shared libraries
# they load, and a passwd naming root and an ordinary user 1000.
#
#   make-image.sh IMAGE [ENGINE_ARGS...]
#
# The engine is podman, or docker when ACQFS_IMAGE_ENGINE=docker.
# ENGINE_ARGS go before `import` (the tests pass podman --runtime and
# --cgroup-manager and --root/--runroot for a private store, and docker -H
# for a daemon of the test's own). Prints nothing
# on success; exits non-zero, naming what is missing, otherwise.
set -euo pipefail
die() { echo "make-image.sh: $*" >&2; exit 1; }
[[ $# -ge 1 ]] || die "usage: make-image.sh IMAGE [PODMAN_ARGS...]"
image=$1
shift

busybox=/bin/busybox
[[ -x $busybox ]] || die "$busybox is missing (apt-get install busybox-static)"
engine=${ACQFS_IMAGE_ENGINE:-podman}
case ${engine##*/} in
  podman) package=podman; quiet=(--quiet) ;;
  docker) package=docker.io; quiet=() ;;
  *) die "ACQFS_IMAGE_ENGINE=$engine: not podman or docker" ;;
esac
command -v "$engine" >/dev/null || die "$engine is missing (apt-get install $package)"

root=$(mktemp -d "${TMPDIR:-/tmp}/acqfs-image.XXXXXX")
trap 'rm -rf "$root"' EXIT
chmod 0755 "$root"  # mktemp made it 0700: the image's / for every user
mkdir -p "$root"/{bin,etc,tmp,root,workspace,home/user,usr/bin}
chmod 1777 "$root/tmp"
cp "$busybox" "$root/bin/busybox"
for applet in $("$busybox" --list); do
  [[ -e $root/bin/$applet ]] || ln -s busybox "$root/bin/$applet"
done

# copy_with_libs PROGRAM...: the program and every library ldd names, at
# the same paths as on the host.
copy_with_libs() {
  local prog lib
  for prog in "$@"; do
    [[ -x $prog ]] || die "$prog is missing"
    cp --parents -L "$prog" "$root"
    while read -r lib; do
      [[ -n $lib ]] && cp --parents -L "$lib" "$root"
    done < <(ldd "$prog" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
  done
}
copy_with_libs /usr/bin/git /usr/bin/make
# git looks for its helpers here; none is needed to commit, but git warns
# when the directory is missing.
mkdir -p "$root/usr/lib/git-core" "$root/usr/share/git-core/templates"

cat >"$root/etc/passwd" <<'PW'
root:x:0:0:root:/root:/bin/sh
user:x:1000:1000:user:/home/user:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PW
cat >"$root/etc/group" <<'GR'
root:x:0:
user:x:1000:
nogroup:x:65534:
GR
chown 1000:1000 "$root/home/user" 2>/dev/null || true

tar -C "$root" --numeric-owner -cf - . |
  "$engine" "$@" import "${quiet[@]}" - "$image" >/dev/null ||
  die "$engine import of $image failed"
