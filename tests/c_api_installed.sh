#!/usr/bin/env bash
# c_api: tests/c_api_test.c compiled as users compile C programs, against an
# installed cordma,
#   gcc -std=c11 -Wall -Wextra -Werror c_api_test.c $(pkg-config --cflags --libs cordma) -lpthread
# and run on this host's RDMA device (RXE_VM_ADDR inside tools/rxe-vm,
# CORDMA_TEST_ADDR natively). The same source also runs under
# AddressSanitizer as c_api_asan, built in-tree against the ASan library.
# Usage: tests/c_api_installed.sh BUILD-DIR SOURCE-DIR
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: c_api_installed.sh BUILD-DIR SOURCE-DIR" >&2; exit 2; }
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
for tool in meson pkg-config gcc; do
  command -v "$tool" >/dev/null 2>&1 || { echo "c_api: $tool is not installed (run tools/install-deps)" >&2; exit 1; }
done
tmp=$(mktemp -d /tmp/cordma-c-api.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/support/installed_cordma.sh
. "$src/tests/support/installed_cordma.sh"
installed_cordma "$build" "$tmp"
echo "c_api: gcc -std=c11 -Wall -Wextra -Werror c_api_test.c \$(pkg-config --cflags --libs cordma) -lpthread"
# shellcheck disable=SC2046
gcc -std=c11 -Wall -Wextra -Werror "$src/tests/c_api_test.c" -o "$tmp/c_api_test" \
  $(pkg-config --cflags --libs cordma) -lpthread
exec "$tmp/c_api_test"
