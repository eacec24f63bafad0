#!/usr/bin/env bash
# cmake_package: CMake users find an installed cordma with find_package.
#
# Why: most C++ programs build with CMake, and `find_package(cordma)` must
# work against the installed tree alone. This installs the build into a
# DESTDIR (the one tests/support/installed_cordma.sh shares with c_api and
# rdma_lib_example), points CMAKE_PREFIX_PATH at it, and
#  1. configures, builds and runs tests/install/cmake/cxx (consumer.cpp
#     linked to cordma::cordma, with no C++ standard of its own: the
#     target's cxx_std_20 compile feature must raise it);
#  2. does the same for tests/install/cmake/c, a C-only project (cordma.h's
#     consumer.c, run; rdma_lib_consumer.c through the compat include
#     folder, built only), where cxx_std_20 must not interfere;
#  3. checks find_package's version rule (SameMinorVersion while 0.x).
# Each program must use the installed libcordma.so. No RDMA device needed.
#
# Usage: tests/cmake_package_test.sh BUILD-DIR SOURCE-DIR
#   (registered in tests/meson.build, suite unit)
set -euo pipefail

fail() { echo "cmake_package: FAIL: $*" >&2; exit 1; }
step() { echo "cmake_package: $*"; }

[ $# -eq 2 ] || { echo "usage: cmake_package_test.sh BUILD-DIR SOURCE-DIR" >&2; exit 2; }
build=$(cd "$1" && pwd) || fail "build directory '$1' does not exist"
src=$(cd "$2" && pwd) || fail "source directory '$2' does not exist"
for tool in meson cmake ninja gcc g++; do
  command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed (run tools/install-deps)"
done

tmp=$(mktemp -d /tmp/cordma-cmake-package.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/support/installed_cordma.sh
. "$src/tests/support/installed_cordma.sh"
installed_cordma "$build" "$tmp" || fail "could not install cordma (above)"
dest=$installed_cordma_dest
# Only the install: no LD_LIBRARY_PATH (CMake puts the imported library's
# folder in the build's RPATH), no pkg-config path.
unset LD_LIBRARY_PATH PKG_CONFIG_PATH
prefix=$dest$(sed -n 's/^prefix=//p' "$(find "$dest" -name cordma.pc -path '*/pkgconfig/*' | head -n 1)")
config=$(find "$dest" -name cordmaConfig.cmake) || true
[ -n "$config" ] || fail "cordmaConfig.cmake was not installed"
[ -f "$(dirname "$config")/cordmaConfigVersion.cmake" ] || fail "cordmaConfigVersion.cmake was not installed beside $config"
step "installed ${config#"$dest"} and cordmaConfigVersion.cmake"

# cmake_build NAME: configure and build tests/install/cmake/NAME against the
# install; fails with CMake's output.
cmake_build() {
  local name=$1 dir=$tmp/$1
  if ! cmake -S "$src/tests/install/cmake/$name" -B "$dir" -G Ninja \
         -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
         -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON >"$tmp/$name-configure.log" 2>&1; then
    cat "$tmp/$name-configure.log" >&2
    fail "cmake could not configure tests/install/cmake/$name against $prefix (find_package(cordma 0.1) above)"
  fi
  local found
  found=$(sed -n 's/^cordma_DIR:PATH=//p' "$dir/CMakeCache.txt")
  case "$found" in
    "$dest"/*) ;;
    *) fail "tests/install/cmake/$name found cordma in '$found', not in the install $prefix" ;;
  esac
  if ! cmake --build "$dir" >"$tmp/$name-build.log" 2>&1; then
    cat "$tmp/$name-build.log" >&2
    fail "tests/install/cmake/$name did not compile or link against cordma::cordma (output above)"
  fi
}

# uses_install PROGRAM: the program resolves libcordma to the install.
uses_install() {
  local used
  used=$(ldd "$1" | awk '$1 ~ /^libcordma\.so/ { print $3 }')
  case "$used" in
    "$dest"/*) ;;
    *) fail "$(basename "$1") resolves libcordma to '${used:-nothing}', not the install in $dest" ;;
  esac
}

# 1. C++.
cmake_build cxx
grep -q -- '-std=gnu++20\|-std=c++20' "$tmp/cxx/compile_commands.json" ||
  fail "cordma::cordma did not raise the C++ standard to C++20 (compile line: $(grep -o '"command": "[^"]*"' "$tmp/cxx/compile_commands.json"))"
uses_install "$tmp/cxx/consumer"
out=$("$tmp/cxx/consumer" 2>&1) || { echo "$out" >&2; fail "the CMake-built C++ consumer failed (output above)"; }
step "C++ (find_package, cordma::cordma, C++20 from the target): $out"

# 2. C.
cmake_build c
! grep -q -- '-std=\(gnu\|c\)++' "$tmp/c/compile_commands.json" ||
  fail "a C target linked to cordma::cordma got a C++ flag: $(grep -o '"command": "[^"]*"' "$tmp/c/compile_commands.json")"
uses_install "$tmp/c/c_consumer"
out=$("$tmp/c/c_consumer" 2>&1) || { echo "$out" >&2; fail "the CMake-built C consumer failed (output above)"; }
step "C: $out"
step "C: rdma_lib_consumer.c (#include \"rdma_lib.h\") compiled and linked"

# 3. Versions: 0.x accepts its own minor release only.
version=$(sed -n "s/^ *version *: *'\([0-9.]*\)'.*/\1/p" "$src/meson.build" | head -n 1)
[ -n "$version" ] || fail "could not read the project version from meson.build"
IFS=. read -r major minor patch <<<"$version"
check_version() {
  if ! cmake -S "$src/tests/install/cmake/version" -B "$tmp/version-$1" -DCMAKE_PREFIX_PATH="$prefix" \
         -DWANT="$1" -DEXPECT="$2" >"$tmp/version.log" 2>&1; then
    cat "$tmp/version.log" >&2
    fail "find_package(cordma $1) against cordma $version: expected found=$2 (output above)"
  fi
  rm -rf "$tmp/version-$1"
}
check_version "$major.$minor" TRUE
check_version "$version" TRUE
check_version "$major.$minor.$((patch + 1))" FALSE
check_version "$major.$((minor + 1))" FALSE
check_version "$((major + 1)).0" FALSE
[ "$minor" -eq 0 ] || check_version "$major.$((minor - 1))" FALSE
check_version "$major.$minor...$major.$((minor + 1))" TRUE
check_version "$major.$((minor + 1))...$((major + 1)).0" FALSE
step "versions: $version accepted for $major.$minor, $version and $major.$minor...$major.$((minor + 1)); refused for $major.$minor.$((patch + 1)), $major.$((minor + 1)), $((major + 1)).0"
step "OK"
