# Sourced by the tests that build C programs the way users do: against an
# installed cordma, through pkg-config. installed_cordma BUILD-DIR TMP-DIR
# makes sure BUILD-DIR/tests/installed-cordma/dest holds a `meson install`
# of the build, sets installed_cordma_dest to it, writes TMP-DIR/pkgconfig/
# cordma.pc with prefix= pointing there (only that line moves:
# PKG_CONFIG_SYSROOT_DIR would move libibverbs' and liburing's paths too)
# and exports PKG_CONFIG_PATH and LD_LIBRARY_PATH so
# `gcc ... $(pkg-config --cflags --libs cordma)` and the program it builds
# find that install and nothing else. On failure it prints why and returns 1.
#
# The install is shared: c_api, rdma_lib_example and cmake_package each
# used to run their own, and `meson install` takes 20 s inside the emulated
# VM (0.7 s natively). It is made again when the build was reconfigured
# (meson-private/install.dat) or any file it copied (listed from meson's
# "Installing X to Y" lines) is newer than the install, under a lock so
# tests running side by side neither race nor read half an install. The
# tests only read it; install_test still runs meson install itself.
#
# Inside tools/rxe-vm (RXE_VM set) the install is the VM's own: the host's
# unit suite (cmake_package) runs beside the VM's rxe suite (c_api,
# rdma_lib_example) on the same build directory, shared over 9p, where a
# lock taken in the VM does not hold against the host; one side could
# remove the install while the other read it.
installed_cordma() {
  local build=$1 tmp=$2 cache pc lib lock
  cache=$build/tests/installed-cordma${RXE_VM:+-vm}
  mkdir -p "$cache" "$tmp/pkgconfig"
  exec {lock}>"$cache.lock"
  flock "$lock"
  if ! installed_cordma_fresh "$build" "$cache"; then
    rm -rf "$cache/dest" "$cache/stamp" "$cache/sources"
    # The stamp's time is taken before meson reads anything, so a file
    # changed while it copies counts as newer than the install.
    touch "$cache/stamp.new"
    if ! meson install -C "$build" --no-rebuild --destdir "$cache/dest" >"$cache/install.log" 2>&1; then
      exec {lock}>&-
      cat "$cache/install.log" >&2
      echo "installed_cordma: meson install failed (output above)" >&2
      return 1
    fi
    sed -n 's/^Installing \(.*\) to .*$/\1/p' "$cache/install.log" | grep -v '^symlink ' > "$cache/sources" || true
    mv "$cache/stamp.new" "$cache/stamp"
  fi
  exec {lock}>&-  # closing it lets the lock go
  installed_cordma_dest=$cache/dest
  pc=$(find "$installed_cordma_dest" -name cordma.pc -path '*/pkgconfig/*' | head -n 1)
  [ -n "$pc" ] || { echo "installed_cordma: cordma.pc was not installed" >&2; return 1; }
  lib=$(find "$installed_cordma_dest" -name 'libcordma.so.*' \( -type f -o -type l \) | head -n 1)
  [ -n "$lib" ] || { echo "installed_cordma: libcordma.so.* was not installed" >&2; return 1; }
  sed "s|^prefix=|prefix=$installed_cordma_dest|" "$pc" > "$tmp/pkgconfig/cordma.pc"
  export PKG_CONFIG_PATH=$tmp/pkgconfig
  export LD_LIBRARY_PATH=$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

# installed_cordma_fresh BUILD CACHE: the install in CACHE is complete and
# nothing it was made from has changed since.
installed_cordma_fresh() {
  local build=$1 cache=$2 file
  [ -f "$cache/stamp" ] && [ -s "$cache/sources" ] || return 1
  [ "$build/meson-private/install.dat" -nt "$cache/stamp" ] && return 1
  while IFS= read -r file; do
    case "$file" in /*) ;; *) file=$build/$file ;; esac
    [ -e "$file" ] || return 1
    [ "$file" -nt "$cache/stamp" ] && return 1
  done < "$cache/sources"
  return 0
}
