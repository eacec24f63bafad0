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
# installed library.  No RDMA device needed.
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
[ -f "$consumer" ] || fail "$consumer is missing"
for tool in meson pkg-config g++; do
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
for h in "$src"/include/cordma/*.hpp "$src"/include/cordma/*/*.hpp; do
  [ -e "$h" ] || continue
  rel=${h#"$src"/include/cordma/}
  [ -f "$incdir/$rel" ] || fail "header cordma/$rel was not installed (expected $incdir/$rel)"
done
[ ! -e "$incdir/meson.build" ] || fail "include/cordma/meson.build was installed with the headers"
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
step "every installed header compiles on its own"

# 2c. The library exports cordma's public API only: no Asio, and of
# cordma::detail only what the public templates call.
exports=$(nm -DC --defined-only "$lib")
asio=$(grep -c 'asio::' <<<"$exports" || true)
[ "$asio" -eq 0 ] || { grep 'asio::' <<<"$exports" | head -5 >&2; fail "libcordma.so exports $asio Asio symbols (first above)"; }
detail=$(grep -c 'cordma::detail::' <<<"$exports" || true)
[ "$detail" -le 16 ] || { grep 'cordma::detail::' <<<"$exports" >&2; fail "libcordma.so exports $detail cordma::detail symbols (above); only what public templates need may be"; }
step "exports: $(wc -l <<<"$exports") symbols, 0 from Asio, $detail from cordma::detail"

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
step "OK"
