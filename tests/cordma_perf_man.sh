#!/usr/bin/env bash
# cordma_perf_man: docs/cordma-perf.1 documents every option cordma-perf has,
# and renders cleanly. The options come from the program itself (what
# `cordma-perf --help` prints) and from its argument parser
# (bench/cordma_perf.cpp's `name == "--x"` tests, which also hold the
# aliases and the refused perftest options --help leaves out): an option
# added to either without a word in the man page fails this test. The page
# must render with `groff -man -ww` without a warning.
#
# Usage: tests/cordma_perf_man.sh CORDMA-PERF SOURCE-DIR
#   (registered in bench/meson.build, suite unit)
set -euo pipefail

fail() { echo "cordma_perf_man: FAIL: $*" >&2; exit 1; }

[ $# -eq 2 ] || { echo "usage: cordma_perf_man.sh CORDMA-PERF SOURCE-DIR" >&2; exit 2; }
perf=$1
src=$(cd "$2" && pwd) || fail "source directory '$2' does not exist"
page=$src/docs/cordma-perf.1
parser=$src/bench/cordma_perf.cpp
[ -f "$page" ] || fail "$page is missing"
[ -f "$parser" ] || fail "$parser is missing"
[ -x "$perf" ] || fail "$perf is not an executable (build bench/cordma-perf)"
command -v groff >/dev/null 2>&1 || fail "groff is not installed (Debian: apt install groff-base, or tools/install-deps)"

# 1. It renders without a warning (-ww: all of them).
warnings=$(groff -man -Tutf8 -ww -z "$page" 2>&1) || fail "groff failed on $page: $warnings"
[ -z "$warnings" ] || fail "groff warns on $page:
$warnings"

# 2. Every option is in it. The page's text with troff's \- as '-' and its
# font changes (\fB, \fR, \fI) dropped, so `.BR \-s ", " \-\-size` reads as
# -s and --size.
help=$("$perf" --help) || fail "$perf --help failed"
text=$(sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' "$page")
options() {
  grep -oE '(^|[^A-Za-z0-9_-])--?[A-Za-z][A-Za-z0-9_-]*' | sed -E 's/^[^-]+//' | sort -u
}
from_help=$(options <<<"$help")
from_parser=$(grep -oE 'name == "-[^"]*"' "$parser" | sed -E 's/name == "([^"]*)"/\1/' | sort -u)
[ "$(wc -l <<<"$from_help")" -ge 20 ] || fail "found only $(wc -l <<<"$from_help") options in $perf --help: is the parsing here out of date?"
[ "$(wc -l <<<"$from_parser")" -ge 20 ] || fail "found only $(wc -l <<<"$from_parser") options in $parser's parser: is the parsing here out of date?"
missing=()
for option in $(sort -u <<<"$from_help"$'\n'"$from_parser"); do
  grep -qE -- "(^|[^A-Za-z0-9_-])$option([^A-Za-z0-9_-]|\$)" <<<"$text" || missing+=("$option")
done
[ ${#missing[@]} -eq 0 ] ||
  fail "docs/cordma-perf.1 does not mention ${missing[*]} (from cordma-perf --help or its argument parser): document each in OPTIONS"
echo "cordma_perf_man: $(sort -u <<<"$from_help"$'\n'"$from_parser" | wc -l) options, each in docs/cordma-perf.1; groff -ww: no warnings"
