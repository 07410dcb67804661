#!/usr/bin/env bash
# Generates the data of the workload comparison (bench/workloads/run.sh).
# Everything is made here, deterministically (fixed seeds), with no download.
#
#   gen.sh checkout DIR NFILES     a committed git checkout of ~NFILES small files
#                                  in nested directories, with .gitignore files
#                                  and some ignored build output beside them
#   gen.sh cproject DIR NFILES     a C project of NFILES .c files with a Makefile
#                                  (`make -j2` builds build/app), committed
#   gen.sh smallfiles DIR NFILES   NFILES small files in nested directories
#   gen.sh data DIR NFILES BIGMIB  NFILES ~1 KiB files under DIR/files and one
#                                  BIGMIB MiB file DIR/big.bin (random bytes)
#   gen.sh blob FILE MIB           one MIB MiB file of random bytes
set -euo pipefail
export LC_ALL=C

die() { echo "gen.sh: $*" >&2; exit 1; }

git_quiet() {
  git -c init.defaultBranch=main -c user.name=bench -c user.email=bench@localhost \
      -c commit.gpgsign=false "$@"
}

# A directory must be new or empty, so a half-made one is never mistaken for data.
fresh_dir() {
  if [[ -e $1 ]]; then
    [[ -d $1 && -z $(ls -A "$1") ]] || die "$1 exists and is not empty"
  fi
  mkdir -p "$1"
}

# Commits everything in DIR as one commit, packs the objects (a real checkout
# is packed) and refreshes the index a second later, so no entry is "racily
# clean" and `git status` need not reread any file.
commit_all() {
  local dir=$1
  git_quiet -C "$dir" add -A
  git_quiet -C "$dir" commit -q -m "generated for the acqfs workload benchmark"
  git_quiet -C "$dir" repack -a -d -q --window=0
  git_quiet -C "$dir" prune-packed
  sleep 1.1
  git_quiet -C "$dir" update-index -q --really-refresh >/dev/null || true
  git_quiet -C "$dir" status --porcelain >/dev/null
  [[ -z $(git -C "$dir" status --porcelain) ]] || die "$dir: not clean after commit"
}

gen_checkout() {
  local dir=$1 n=$2
  [[ $n =~ ^[0-9]+$ && $n -ge 100 ]] || die "checkout: NFILES must be a number >= 100"
  fresh_dir "$dir"
  git_quiet init -q "$dir"
  cat >"$dir/.gitignore" <<'EOF'
# build output
/build/
/dist/
*.o
*.a
*.so
*.d
# languages
__pycache__/
*.pyc
node_modules/
.venv/
# editors and tools
.cache/
.idea/
.vscode/
*.swp
*~
*.log
*.tmp
.DS_Store
EOF
  printf '# Generated checkout\n\n%s files in nested directories.\n' "$n" >"$dir/README.md"
  printf 'all:\n\t@echo nothing to build\n' >"$dir/Makefile"
  # ~100 files per leaf directory, three levels deep; every tenth leaf directory
  # also holds ignored output (__pycache__, *.log), and build/ holds ignored
  # objects (about 1% of the files), as in a checkout someone has been working in.
  awk -v n="$n" -v root="$dir" '
    function leaf(l) { return sprintf("%s/mod%02d/pkg%02d/sub%02d", root, int(l / 50), int(l / 5) % 10, l % 5) }
    BEGIN {
      leaves = int((n + 99) / 100)
      for (l = 0; l < leaves; l++) print leaf(l)
      for (l = 0; l < leaves; l += 10) print leaf(l) "/__pycache__"
      print root "/build/obj"
    }' </dev/null | xargs mkdir -p
  awk -v n="$n" -v root="$dir" '
    function leaf(l) { return sprintf("%s/mod%02d/pkg%02d/sub%02d", root, int(l / 50), int(l / 5) % 10, l % 5) }
    function body(f, size,   s, line) {
      s = 0
      while (s < size) {
        line = ""
        for (k = 0; k < 8; k++) line = line w[int(rand() * nw) + 1] " " int(rand() * 100000) " "
        print line > f
        s += length(line) + 1
      }
      close(f)
    }
    BEGIN {
      srand(42)
      split("static const int return struct void char if else while for switch case break unsigned size_t buffer index count value result error state config handler request response client server module package import export default async await function class self this", w, " ")
      nw = length(w)
      split("c h py js md json txt go rs yaml", ext, " ")
      for (i = 0; i < n; i++) {
        l = int(i / 100)
        body(sprintf("%s/file%03d.%s", leaf(l), i % 100, ext[i % 10 + 1]), 200 + int(rand() * 2800))
      }
      leaves = int((n + 99) / 100)
      for (l = 0; l < leaves; l += 10) {
        body(leaf(l) "/__pycache__/file000.cpython-311.pyc", 600)
        body(leaf(l) "/test-run.log", 400)
        f = leaf(l) "/.gitignore"; print "*.generated" > f; print "/tmp/" > f; close(f)
      }
      for (i = 0; i < int(n / 100); i++) body(sprintf("%s/build/obj/o%05d.o", root, i), 1500)
    }' </dev/null
  local made
  made=$(find "$dir" -path "$dir/.git" -prune -o -type f -print | wc -l)
  ((made >= n)) || die "checkout: made only $made files of $n"
  commit_all "$dir"
}

gen_cproject() {
  local dir=$1 n=$2
  [[ $n =~ ^[0-9]+$ && $n -ge 1 ]] || die "cproject: NFILES must be a number >= 1"
  fresh_dir "$dir"
  git_quiet init -q "$dir"
  mkdir -p "$dir/include"
  printf 'build/\n*.o\n*.d\n' >"$dir/.gitignore"
  cat >"$dir/Makefile" <<'EOF'
CC ?= cc
CFLAGS ?= -O2 -g -Wall -Wextra
SRCS := main.c $(wildcard src/*/*.c)
OBJS := $(SRCS:%.c=build/%.o)

build/app: $(OBJS)
	$(CC) -o $@ $^

build/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Iinclude -MMD -MP -c $< -o $@

clean:
	rm -rf build

.PHONY: clean
-include $(OBJS:.o=.d)
EOF
  cat >"$dir/include/util.h" <<'EOF'
#ifndef UTIL_H
#define UTIL_H
#include <stddef.h>
#include <stdint.h>
#define MIX(a, b) (((a) * 2654435761u) ^ ((b) + 0x9e3779b9u + ((a) << 6) + ((a) >> 2)))
static inline uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }
static inline uint32_t hash_bytes(const unsigned char *p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
  return h;
}
struct item { int id; uint32_t key; char name[32]; struct item *next; };
#endif
EOF
  awk -v n="$n" -v root="$dir" '
    BEGIN {
      h = root "/include/proj.h"
      print "#ifndef PROJ_H\n#define PROJ_H\n#include \"util.h\"" > h
      for (i = 0; i < n; i++) printf "int unit%04d_run(int seed);\n", i > h
      print "#endif" > h; close(h)
      m = root "/main.c"
      print "#include <stdio.h>\n#include \"proj.h\"\nint main(void) {\n  long sum = 0;" > m
      for (i = 0; i < n; i++) printf "  sum += unit%04d_run(%d);\n", i, i > m
      print "  printf(\"%ld\\n\", sum);\n  return 0;\n}" > m; close(m)
      for (i = 0; i < n; i++) {
        d = sprintf("%s/src/m%02d", root, int(i / 50))
        if (!(d in made)) { system("mkdir -p " d); made[d] = 1 }
        f = sprintf("%s/unit%04d.c", d, i)
        print "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include \"proj.h\"\n" > f
        for (k = 0; k < 4; k++) {
          printf "static uint32_t step%d(struct item *it, uint32_t x) {\n", k > f
          printf "  for (int i = 0; i < %d; i++) {\n", 8 + k > f
          printf "    x = MIX(x, (uint32_t)i) + rotl32(x, %d);\n", (i + k) % 31 + 1 > f
          print  "    switch (x & 3u) {\n    case 0: it->key ^= x; break;\n    case 1: it->id += (int)(x >> 3); break;\n    case 2: snprintf(it->name, sizeof it->name, \"n%u\", x); break;\n    default: x += hash_bytes((const unsigned char *)it->name, strlen(it->name));\n    }\n  }\n  return x;\n}\n" > f
        }
        printf "int unit%04d_run(int seed) {\n  struct item *items = calloc(16, sizeof *items);\n  if (!items) return -1;\n  uint32_t x = (uint32_t)seed;\n", i > f
        print "  for (int j = 0; j < 16; j++) {\n    items[j].id = j;\n    x = step0(&items[j], x);\n    x = step1(&items[j], x);\n    x = step2(&items[j], x);\n    x = step3(&items[j], x);\n  }\n  int r = (int)(x % 1000u) + items[15].id;\n  free(items);\n  return r;\n}" > f
        close(f)
      }
    }' </dev/null
  commit_all "$dir"
}

gen_smallfiles() {
  local dir=$1 n=$2
  [[ $n =~ ^[0-9]+$ && $n -ge 1 ]] || die "smallfiles: NFILES must be a number >= 1"
  fresh_dir "$dir"
  # Like a node_modules tree: packages of 50 files in lib/ and test/.
  awk -v n="$n" -v root="$dir" '
    BEGIN {
      srand(7)
      for (i = 0; i < n; i++) {
        p = int(i / 50)
        d = sprintf("%s/pkg%04d/%s", root, p, (i % 50 < 40) ? "lib" : "test")
        if (!(d in made)) { system("mkdir -p " d); made[d] = 1 }
        f = sprintf("%s/f%02d.js", d, i % 50)
        size = 100 + int(rand() * 1900)
        s = ""
        while (length(s) < size) s = s "module.exports.v" int(rand() * 1000000) " = " int(rand() * 1000) ";\n"
        printf "%s", s > f
        close(f)
      }
    }' </dev/null
}

gen_data() {
  local dir=$1 n=$2 mib=$3
  [[ $n =~ ^[0-9]+$ && $mib =~ ^[0-9]+$ && $mib -ge 1 ]] || die "data: NFILES and BIGMIB must be numbers"
  fresh_dir "$dir"
  awk -v n="$n" -v root="$dir" '
    BEGIN {
      for (i = 0; i < n; i++) {
        d = sprintf("%s/files/d%02d", root, int(i / 100))
        if (!(d in made)) { system("mkdir -p " d); made[d] = 1 }
        f = sprintf("%s/f%04d.txt", d, i)
        for (k = 0; k < 16; k++) printf "line %02d of file %04d: 0123456789abcdefghijklmnopqrstuvwxyz\n", k, i > f
        close(f)
      }
    }' </dev/null
  gen_blob "$dir/big.bin" "$mib"
}

gen_blob() {
  local file=$1 mib=$2
  [[ $mib =~ ^[0-9]+$ && $mib -ge 1 ]] || die "blob: MIB must be a number >= 1"
  [[ ! -e $file ]] || die "$file exists"
  head -c "$((mib * 1024 * 1024))" /dev/urandom >"$file.part"
  mv "$file.part" "$file"
}

case ${1:-} in
  checkout) [[ $# -eq 3 ]] || die "usage: gen.sh checkout DIR NFILES"; gen_checkout "$2" "$3" ;;
  cproject) [[ $# -eq 3 ]] || die "usage: gen.sh cproject DIR NFILES"; gen_cproject "$2" "$3" ;;
  smallfiles) [[ $# -eq 3 ]] || die "usage: gen.sh smallfiles DIR NFILES"; gen_smallfiles "$2" "$3" ;;
  data) [[ $# -eq 4 ]] || die "usage: gen.sh data DIR NFILES BIGMIB"; gen_data "$2" "$3" "$4" ;;
  blob) [[ $# -eq 3 ]] || die "usage: gen.sh blob FILE MIB"; gen_blob "$2" "$3" ;;
  *) die "usage: gen.sh checkout|cproject|smallfiles|data|blob ... (see the top of this file)" ;;
esac
