#!/usr/bin/env bash
# subproject_test.sh: check that cordma used as a Meson subproject builds and
# installs the library alone, and that a consumer links against it.
#
# Why: projects pull cordma in as subprojects/cordma and `dependency('cordma')`
# (cordma's meson.build calls meson.override_dependency('cordma', ...)).  Its
# examples, bench and tests options are features whose `auto` means "only
# when cordma is the main project"; if that ever regresses, every consumer
# silently compiles (and `meson install`s) rpc_server, cordma-perf, the
# Catch2 suites and their dependencies.  So this creates a throwaway consumer
# project whose subprojects/cordma is a symlink to this source tree, with a
# main.cpp that includes <cordma/builder.hpp>, and:
#   1. meson setup --wrap-mode=nodownload; meson introspect --targets must
#      show no executable of cordma's (rpc_server, cordma-perf, *_test, ...)
#      and nothing defined in its examples/, bench/ or tests/, and
#      --installed must hold no program;
#   2. meson compile -j2 (compiles libcordma, the slow part, as a unity
#      build: the main build already compiles every source alone): the consumer
#      must link against the subproject's libcordma and run (it opens no
#      device), and no cordma program may have been built;
#   3. a second setup only (no compile) with -Dcordma:examples=enabled
#      -Dcordma:bench=enabled must define rpc_server and cordma-perf (enabled
#      forces them on) and still install neither.
# No RDMA device needed.
#
# Usage: tests/subproject_test.sh SOURCE-DIR
#   (registered in tests/meson.build as the `subproject` test of the unit suite)
set -euo pipefail

fail() { echo "subproject_test: FAIL: $*" >&2; exit 1; }
step() { echo "subproject_test: $*"; }

[ $# -eq 1 ] || { echo "usage: subproject_test.sh SOURCE-DIR" >&2; exit 2; }
src=$(cd "$1" && pwd) || fail "source directory '$1' does not exist"
{ [ -f "$src/meson.build" ] && [ -f "$src/include/cordma/builder.hpp" ]; } ||
  fail "$src is not cordma's source tree (no meson.build or include/cordma/builder.hpp)"
for tool in meson ninja python3 ldd; do
  command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed (run tools/install-deps)"
done

tmp=$(mktemp -d /tmp/cordma-subproject-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
consumer=$tmp/consumer
build=$tmp/build

# The consumer project: cordma is a subproject, found through the
# dependency() override, nothing else.
mkdir -p "$consumer/subprojects"
ln -s "$src" "$consumer/subprojects/cordma"
cat > "$consumer/meson.build" <<'EOF'
project('cordma_consumer', 'cpp',
  default_options : ['cpp_std=c++20'])
subproject('cordma')
executable('consumer', 'main.cpp', dependencies : dependency('cordma'))
EOF
cat > "$consumer/main.cpp" <<'EOF'
// A program in a project that uses cordma as a Meson subproject.
#include <cordma/builder.hpp>

#include <cstdio>

int main() {
    cordma::builder b;  // libcordma's constructor; opens no device until a connection needs one
    const cordma::connection_settings& settings = b.settings();
    std::printf("consumer: made a cordma::builder (settings at %p) through dependency('cordma')\n",
                static_cast<const void*>(&settings));
    return 0;
}
EOF

# Prints every target and installed file of build directory $1 that
# belongs to cordma's examples, bench or tests, one a line: empty when
# cordma built the library alone.  With --installed-only, only programs
# that would be installed.
cordma_extras() {
  local dir=$1 mode=${2:-}
  meson introspect "$dir" --targets > "$tmp/targets.json" ||
    fail "meson introspect $dir --targets failed"
  meson introspect "$dir" --installed > "$tmp/installed.json" ||
    fail "meson introspect $dir --installed failed"
  python3 - "$tmp/targets.json" "$tmp/installed.json" "$mode" <<'EOF'
import fnmatch, json, os, sys
targets = json.load(open(sys.argv[1]))
installed = json.load(open(sys.argv[2]))
installed_only = sys.argv[3] == "--installed-only"
names = ["rpc_server", "rpc_client", "round_trip", "quick_start", "mr_exchange",
         "cordma-perf", "coroutine_overhead", "peer", "catch_main", "cordma_asan",
         "*_test"]
if not installed_only:
    for t in targets:
        if t.get("subproject") != "cordma":
            continue
        where = os.path.relpath(os.path.realpath(t.get("defined_in", "")),
                                os.path.realpath(os.environ["CORDMA_SRC"]))
        top = where.split(os.sep)[0]
        if (t["type"] == "executable" or top in ("examples", "bench", "tests")
                or any(fnmatch.fnmatch(t["name"], n) for n in names)):
            print("target %s (%s, defined in %s)" % (t["name"], t["type"], where))
for built, dest in installed.items():
    base = os.path.basename(dest)
    if ("/bin/" in dest or "/libexec/" in dest
            or any(fnmatch.fnmatch(base, n) for n in names)):
        print("installed %s -> %s" % (os.path.basename(built), dest))
EOF
}
export CORDMA_SRC=$src

# 1. Configure: cordma's extras must not even be defined.
step "meson setup (consumer with subprojects/cordma -> $src)"
if ! meson setup --wrap-mode=nodownload --buildtype=plain -Dunity=subprojects "$build" "$consumer" >"$tmp/setup.log" 2>&1; then
  cat "$tmp/setup.log" >&2
  fail "meson setup of a project using cordma as a subproject failed (output above)"
fi
extras=$(cordma_extras "$build")
if [ -n "$extras" ]; then
  printf '  %s\n' "$extras" >&2
  fail "as a subproject with default options, cordma defines or installs its examples, bench or tests (above);" \
       "their options' auto must mean off when meson.is_subproject() (meson.build, meson_options.txt)," \
       "and no bench/examples executable may be installed as a subproject"
fi
step "cordma as a subproject defines only: $(python3 -c '
import json, sys
print(", ".join(sorted("%s (%s)" % (t["name"], t["type"]) for t in json.load(open(sys.argv[1])) if t.get("subproject") == "cordma")))' "$tmp/targets.json")"

# 2. What a build would do: ninja's dry run lists every step; none may
# compile or link anything of cordma's but the library.
step "ninja -n (what a build of the consumer would do)"
ninja -C "$build" -n > "$tmp/plan.log" 2>&1 || { cat "$tmp/plan.log" >&2; fail "ninja -n in $build failed (output above)"; }
if grep -E 'subprojects/cordma/(examples|bench|tests)/' "$tmp/plan.log" >&2; then
  fail "a build would compile cordma's examples, bench or tests as a subproject (steps above)"
fi
grep -q 'Linking target consumer' "$tmp/plan.log" || fail "the plan does not link the consumer program: $(tail -n 5 "$tmp/plan.log")"
step "a build compiles $(grep -c 'Compiling' "$tmp/plan.log") files: libcordma's and the consumer's, nothing else"

# 2b. The build itself (compiles libcordma: a minute natively, far longer
# under the emulated CPU of tools/rxe-vm, so there only when asked with
# CORDMA_SUBPROJECT_COMPILE=1): the consumer links against the
# subproject's libcordma and runs.
if [ -z "${RXE_VM:-}" ] || [ "${CORDMA_SUBPROJECT_COMPILE:-0}" = 1 ]; then
  step "meson compile -j2 (builds libcordma; takes a few minutes)"
  if ! meson compile -C "$build" -j 2 >"$tmp/compile.log" 2>&1; then
    tail -n 80 "$tmp/compile.log" >&2
    fail "building the consumer project with cordma as a subproject failed (last lines above)"
  fi
  exe=$build/consumer
  [ -x "$exe" ] || fail "the consumer program $exe was not linked"
  used=$(ldd "$exe" | awk '$1 ~ /^libcordma\.so/ { print $3 }')
  case "$used" in
    "$build"/subprojects/cordma/*) ;;
    *) fail "the consumer resolves libcordma to '${used:-nothing}', not the subproject's build in $build/subprojects/cordma" ;;
  esac
  out=$("$exe" 2>&1) || { echo "$out" >&2; fail "the consumer program failed (output above)"; }
  step "$out"
  stray=$(find "$build/subprojects/cordma" -type f -perm -u+x ! -name '*.so' ! -name '*.so.*' 2>/dev/null || true)
  if [ -n "$stray" ]; then
    printf '  %s\n' "$stray" >&2
    fail "cordma as a subproject built programs (above); only libcordma should be built"
  fi
  for d in examples bench tests; do
    [ ! -d "$build/subprojects/cordma/$d" ] ||
      fail "cordma as a subproject built something in $d/: $(find "$build/subprojects/cordma/$d" -mindepth 1 -maxdepth 1 -printf '%f ' | head -c 200)"
  done
  step "built: consumer, $(cd "$build" && find subprojects/cordma -name 'libcordma.so*' | sort | head -n 1); no example, bench or test program"
else
  step "not compiling inside tools/rxe-vm (the plan above shows what would be built; CORDMA_SUBPROJECT_COMPILE=1 compiles)"
fi

# 3. enabled forces the extras on, but a subproject still installs none.
step "meson setup -Dcordma:examples=enabled -Dcordma:bench=enabled (configure only)"
if ! meson setup --wrap-mode=nodownload --buildtype=plain \
       -Dcordma:examples=enabled -Dcordma:bench=enabled \
       "$tmp/build-enabled" "$consumer" >"$tmp/setup-enabled.log" 2>&1; then
  cat "$tmp/setup-enabled.log" >&2
  fail "meson setup with -Dcordma:examples=enabled -Dcordma:bench=enabled failed (output above)"
fi
extras=$(cordma_extras "$tmp/build-enabled")
for want in rpc_server cordma-perf; do
  grep -q "^target $want " <<<"$extras" ||
    fail "-Dcordma:examples=enabled -Dcordma:bench=enabled did not define $want in the subproject"
done
installed=$(cordma_extras "$tmp/build-enabled" --installed-only)
if [ -n "$installed" ]; then
  printf '  %s\n' "$installed" >&2
  fail "with examples and bench enabled, cordma as a subproject would install programs (above);" \
       "their executable()s must not install when meson.is_subproject()"
fi
step "enabled: examples and bench defined in the subproject, none installed"
step "OK"
