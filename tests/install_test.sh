#!/usr/bin/env bash
# install_test.sh: check that an installed cordma is usable on its own.
#
# Why: users build against the installed headers, libcordma.so and cordma.pc,
# not the build tree; a header left out of the install, a wrong pkg-config
# line or a missing library only shows up there.  This installs the build into
# a temporary DESTDIR, checks the files are there, compiles
# tests/install/consumer.cpp with
#   g++ -std=c++20 consumer.cpp $(pkg-config --cflags --libs cordma)
# against that install alone (its cordma.pc with prefix= moved into DESTDIR), runs it
# with LD_LIBRARY_PATH on the installed lib dir, and checks it used the
# installed library.  The C API gets the same: tests/install/consumer.c is
# compiled with
#   gcc -std=c11 -Wall -Werror consumer.c $(pkg-config --cflags --libs cordma)
# (cordma.pc must suit a C compiler: no C++ flag, so the C++ line above
# passes -std=c++20 itself) and run, and tests/install/rdma_lib_consumer.c,
# which includes "rdma_lib.h" as rdma_lib programs do, is compiled and
# linked with the same line less -Werror.  No RDMA device needed.
#
# Usage: tests/install_test.sh BUILD-DIR SOURCE-DIR
#   (registered in tests/meson.build as the `install` test of the unit suite)
set -euo pipefail

fail() { echo "install_test: FAIL: $*" >&2; exit 1; }
step() { echo "install_test: $*"; }

[ $# -eq 2 ] || { echo "usage: install_test.sh BUILD-DIR SOURCE-DIR" >&2; exit 2; }
build=$(cd "$1" && pwd) || fail "build directory '$1' does not exist"
src=$(cd "$2" && pwd) || fail "source directory '$2' does not exist"
consumer=$src/tests/install/consumer.cpp
c_consumer=$src/tests/install/consumer.c
rdma_lib_consumer=$src/tests/install/rdma_lib_consumer.c
for f in "$consumer" "$c_consumer" "$rdma_lib_consumer"; do
  [ -f "$f" ] || fail "$f is missing"
done
for tool in meson pkg-config g++ gcc; do
  command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed (run tools/install-deps)"
done

tmp=$(mktemp -d /tmp/cordma-install-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/dest

# 1. Install into DESTDIR.
step "meson install --destdir $dest"
if ! meson install -C "$build" --no-rebuild --quiet --destdir "$dest" >"$tmp/install.log" 2>&1; then
  cat "$tmp/install.log" >&2
  fail "meson install failed (output above); is the build up to date (meson compile -C $build)?"
fi

# 2. The files a user needs are there.
pc=$(find "$dest" -name cordma.pc -path '*/pkgconfig/*' | head -n 1)
[ -n "$pc" ] || fail "cordma.pc was not installed (expected under <libdir>/pkgconfig in $dest)"
lib=$(find "$dest" -name 'libcordma.so.*' \( -type f -o -type l \) | head -n 1)
[ -n "$lib" ] || fail "libcordma.so.* was not installed"
libdir=$(dirname "$lib")
[ -e "$libdir/libcordma.so" ] || fail "the development symlink $libdir/libcordma.so was not installed"
incdir=$(find "$dest" -type d -name cordma -path '*/include/cordma' | head -n 1)
[ -n "$incdir" ] || fail "no include/cordma directory was installed"
for h in "$src"/include/cordma/*.hpp "$src"/include/cordma/*/*.hpp "$src"/include/cordma/*.h "$src"/include/cordma/*/*.h; do
  [ -e "$h" ] || continue
  rel=${h#"$src"/include/cordma/}
  [ -f "$incdir/$rel" ] || fail "header cordma/$rel was not installed (expected $incdir/$rel)"
done
[ ! -e "$incdir/meson.build" ] || fail "include/cordma/meson.build was installed with the headers"
# The license and cordma-perf's manual page go with the library.
license=$(find "$dest" -path '*/share/doc/cordma/LICENSE')
[ -n "$license" ] || fail "LICENSE was not installed to <datadir>/doc/cordma"
cmp -s "$license" "$src/LICENSE" || fail "the installed ${license#"$dest"} differs from LICENSE"
if [ -e "$build/bench/cordma-perf" ]; then
  [ -n "$(find "$dest" -path '*/man1/cordma-perf.1*')" ] || fail "cordma-perf is built but its man page (docs/cordma-perf.1) was not installed to <mandir>/man1"
fi
if [ -e "$build/tools/stat/cordma-stat" ]; then
  [ -n "$(find "$dest" -path '*/bin/cordma-stat')" ] || fail "cordma-stat is built but was not installed to <bindir>"
  [ -n "$(find "$dest" -path '*/man1/cordma-stat.1*')" ] || fail "cordma-stat is built but its man page (docs/cordma-stat.1) was not installed to <mandir>/man1"
fi
# Only the public API is installed: nothing from lib/ (private headers live
# there), and nothing under include/cordma that is not in the source tree.
while IFS= read -r h; do
  rel=${h#"$incdir"/}
  [ -f "$src/include/cordma/$rel" ] || fail "cordma/$rel was installed, but is not a public header in include/cordma"
done <<< "$(find "$incdir" -type f)"
while IFS= read -r h; do
  name=$(basename "$h")
  [ ! -e "$incdir/$name" ] && [ ! -e "$incdir/detail/$name" ] ||
    fail "the private header lib/${h#"$src"/lib/} was installed as cordma/$name"
done <<< "$(find "$src/lib" -name '*.hpp')"
step "installed: ${pc#"$dest"}, ${lib#"$dest"}, ${incdir#"$dest"}/ ($(find "$incdir" -type f | wc -l) public headers)"

# 2b. Every installed header compiles on its own (includes what it uses),
# against the installed tree alone. (Here-strings, not process
# substitution: tools/rxe-vm's guest has no /dev/fd.)
while IFS= read -r h; do
  rel=${h#"$incdir"/}
  printf '#include <cordma/%s>\n#include <cordma/%s>\nint main() {}\n' "$rel" "$rel" > "$tmp/self.cpp"
  if ! g++ -std=c++20 -fsyntax-only -I "$(dirname "$incdir")" "$tmp/self.cpp" >"$tmp/self.log" 2>&1; then
    cat "$tmp/self.log" >&2
    fail "the installed header <cordma/$rel> does not compile on its own (output above)"
  fi
done <<< "$(find "$incdir" -name '*.hpp' | sort)"
# The C headers (cordma.h, rdma_lib.h and its compat copy) compile on their
# own as strict C11, and as C++20 (they say extern "C" for C++ callers).
while IFS= read -r h; do
  rel=${h#"$incdir"/}
  printf '#include <cordma/%s>\n#include <cordma/%s>\nint main(void) { return 0; }\n' "$rel" "$rel" > "$tmp/self.c"
  if ! gcc -std=c11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I "$(dirname "$incdir")" "$tmp/self.c" >"$tmp/self.log" 2>&1; then
    cat "$tmp/self.log" >&2
    fail "the installed C header <cordma/$rel> does not compile on its own as C11 (output above)"
  fi
  cp "$tmp/self.c" "$tmp/self_c.cpp"
  if ! g++ -std=c++20 -Wall -Wextra -Werror -fsyntax-only -I "$(dirname "$incdir")" "$tmp/self_c.cpp" >"$tmp/self.log" 2>&1; then
    cat "$tmp/self.log" >&2
    fail "the installed C header <cordma/$rel> does not compile on its own as C++20 (output above)"
  fi
done <<< "$(find "$incdir" -name '*.h' | sort)"
step "every installed header compiles on its own (C headers as C11 and C++20)"

# 2c. The library exports cordma's public API only: no Asio, and of
# cordma::detail only what the public templates call.
exports=$(nm -DC --defined-only "$lib")
asio=$(grep -c 'asio::' <<<"$exports" || true)
[ "$asio" -eq 0 ] || { grep 'asio::' <<<"$exports" | head -5 >&2; fail "libcordma.so exports $asio Asio symbols (first above)"; }
detail=$(grep -c 'cordma::detail::' <<<"$exports" || true)
[ "$detail" -le 16 ] || { grep 'cordma::detail::' <<<"$exports" >&2; fail "libcordma.so exports $detail cordma::detail symbols (above); only what public templates need may be"; }
# Every function cordma.h declares is exported, unmangled, for C callers.
c_functions=$(sed -n 's/^CORDMA_C_API .*[ *]\(cordma_[a-z0-9_]*\)(.*/\1/p' "$incdir/cordma.h" "$incdir/rdma_lib.h")
[ -n "$c_functions" ] || fail "found no CORDMA_C_API function in the installed cordma.h"
c_exports=$(nm -D --defined-only "$lib" | awk '$2 == "T" { print $3 }')
for f in $c_functions; do
  grep -qx "$f" <<<"$c_exports" || fail "libcordma.so does not export $f, which cordma.h or rdma_lib.h declares"
done
step "exports: $(wc -l <<<"$exports") symbols, 0 from Asio, $detail from cordma::detail, all $(wc -w <<<"$c_functions") C API functions"

# 3. pkg-config reads the installed cordma.pc.  Its paths all hang off
# ${prefix}, which is where a real install would put them; only that one line
# is moved into DESTDIR (PKG_CONFIG_SYSROOT_DIR would move libibverbs' and
# libnl's paths too, and --define-prefix guesses wrong with lib/<multiarch>).
grep -q '^prefix=/' "$pc" || fail "$pc has no absolute prefix= line"
mkdir -p "$tmp/pkgconfig"
sed "s|^prefix=|prefix=$dest|" "$pc" > "$tmp/pkgconfig/cordma.pc"
export PKG_CONFIG_PATH=$tmp/pkgconfig
flags=$(pkg-config --cflags --libs cordma 2>"$tmp/pkg.log") || {
  cat "$tmp/pkg.log" >&2
  fail "pkg-config --cflags --libs cordma failed with the installed $pc (output above)"
}
case "$flags" in
  *"-I$dest"*"-L$dest"*|*"-L$dest"*"-I$dest"*) ;;
  *) fail "pkg-config's flags for cordma do not point into the install: $flags" ;;
esac
step "pkg-config: $flags"
# 3b. cordma.pc carries only what consumers need: no code-generation or
# language flag (-std=c++20 would break C programs; -foptimize-sibling-calls
# is the consumer's choice, README), and Requires only libibverbs, whose
# header the public headers include. librdmacm, liburing and PMIx are
# libcordma.so's own (Requires.private, for static links only).
cflags=$(pkg-config --cflags cordma)
for flag in -std= -foptimize-sibling-calls; do
  case " $cflags " in
    *" $flag"*) fail "pkg-config --cflags cordma forces $flag on every consumer: $cflags" ;;
  esac
done
requires=$(pkg-config --print-requires cordma)
[ "$requires" = libibverbs ] ||
  fail "cordma.pc's Requires is '$(echo $requires)', expected libibverbs alone (the one library public headers include)"
private=$(pkg-config --print-requires-private cordma)
for p in librdmacm liburing; do
  grep -qx "$p" <<<"$private" || fail "cordma.pc's Requires.private lacks $p, which a static link of libcordma needs: $(echo $private)"
done
step "pkg-config: cflags without -std= or -foptimize-sibling-calls; Requires: libibverbs; Requires.private: $(echo $private)"

# 4. A user's program compiles and links against the install alone.
# shellcheck disable=SC2086 # $flags is a list of flags
if ! g++ -std=c++20 -o "$tmp/consumer" "$consumer" $flags >"$tmp/cc.log" 2>&1; then
  cat "$tmp/cc.log" >&2
  fail "compiling tests/install/consumer.cpp against the installed cordma failed (output above)"
fi

# 5. It runs, on the installed library.
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
used=$(ldd "$tmp/consumer" | awk '$1 ~ /^libcordma\.so/ { print $3 }')
case "$used" in
  "$dest"/*) ;;
  *) fail "the consumer resolves libcordma to '${used:-nothing}', not the install in $libdir" ;;
esac
out=$("$tmp/consumer" 2>&1) || { echo "$out" >&2; fail "the consumer program failed (output above)"; }
step "$out"

# 6. A C program: the same install, through gcc in C11, warnings as errors.
# shellcheck disable=SC2086 # $flags is a list of flags
if ! gcc -std=c11 -Wall -Werror -o "$tmp/c_consumer" "$c_consumer" $flags >"$tmp/cc.log" 2>&1; then
  cat "$tmp/cc.log" >&2
  fail "compiling tests/install/consumer.c with gcc -std=c11 -Wall -Werror against the installed cordma failed (output above)"
fi
out=$("$tmp/c_consumer" 2>&1) || { echo "$out" >&2; fail "the C consumer program failed (output above)"; }
step "$out"

# 7. An rdma_lib program's #include "rdma_lib.h" resolves through cordma.pc,
# and its calls link (compiled and linked only: running it needs a peer).
# shellcheck disable=SC2086 # $flags is a list of flags
if ! gcc -std=c11 -Wall -o "$tmp/rdma_lib_consumer" "$rdma_lib_consumer" $flags >"$tmp/cc.log" 2>&1; then
  cat "$tmp/cc.log" >&2
  fail "compiling tests/install/rdma_lib_consumer.c (#include \"rdma_lib.h\") against the installed cordma failed (output above)"
fi
step "tests/install/rdma_lib_consumer.c compiled and linked"
step "OK"
