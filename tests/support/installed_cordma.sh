# Sourced by the tests that build C programs the way users do: against an
# installed cordma, through pkg-config. installed_cordma BUILD-DIR TMP-DIR
# runs `meson install` into TMP-DIR/dest, writes a cordma.pc whose prefix=
# points there (only that line moves: PKG_CONFIG_SYSROOT_DIR would move
# libibverbs' and liburing's paths too) and exports PKG_CONFIG_PATH and
# LD_LIBRARY_PATH so `gcc ... $(pkg-config --cflags --libs cordma)` and the
# program it builds find that install and nothing else. On failure it
# prints why and returns 1.
installed_cordma() {
  local build=$1 tmp=$2 dest pc lib
  dest=$tmp/dest
  if ! meson install -C "$build" --no-rebuild --quiet --destdir "$dest" >"$tmp/install.log" 2>&1; then
    cat "$tmp/install.log" >&2
    echo "installed_cordma: meson install failed (output above)" >&2
    return 1
  fi
  pc=$(find "$dest" -name cordma.pc -path '*/pkgconfig/*' | head -n 1)
  [ -n "$pc" ] || { echo "installed_cordma: cordma.pc was not installed" >&2; return 1; }
  lib=$(find "$dest" -name 'libcordma.so.*' \( -type f -o -type l \) | head -n 1)
  [ -n "$lib" ] || { echo "installed_cordma: libcordma.so.* was not installed" >&2; return 1; }
  mkdir -p "$tmp/pkgconfig"
  sed "s|^prefix=|prefix=$dest|" "$pc" > "$tmp/pkgconfig/cordma.pc"
  export PKG_CONFIG_PATH=$tmp/pkgconfig
  export LD_LIBRARY_PATH=$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}
