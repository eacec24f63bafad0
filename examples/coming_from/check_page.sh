#!/usr/bin/env bash
# check_page: docs/coming-from/rpc.md shows examples/coming_from/rpc.cpp's
# code word for word. Each region of the program (the lines between two
# "// [NAME]" lines) must equal, once their common indentation is removed,
# the ```cpp block that follows "<!-- region: NAME -->" on the page; and
# every such marker on the page must name a region of the program.
# Usage: examples/coming_from/check_page.sh SOURCE-DIR
set -euo pipefail
src=${1:?usage: check_page.sh SOURCE-DIR}
program=$src/examples/coming_from/rpc.cpp page=$src/docs/coming-from/rpc.md
fail() { echo "check_page: FAIL: $*" >&2; exit 1; }
[ -f "$program" ] && [ -f "$page" ] || fail "$program or $page is missing"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/check-page.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

dedent() { awk '{ line[NR] = $0; if ($0 ~ /[^ ]/) { match($0, /^ */); if (min == "" || RLENGTH < min) min = RLENGTH } }
  END { for (i = 1; i <= NR; i++) print substr(line[i], min + 1) }'; }
names=$(sed -n 's|^ *// \[\([a-z_]*\)\]$|\1|p' "$program" | sort -u)
[ -n "$names" ] || fail "$program has no // [NAME] regions"
for name in $names; do
  awk -v m="// [$name]" '{ t = $0; sub(/^ */, "", t) } t == m { on = !on; next } on' "$program" | dedent > "$tmp/program"
  awk -v m="<!-- region: $name -->" '$0 == m { found = 1; next }
    found == 1 && /^```cpp$/ { found = 2; next } found == 2 && /^```$/ { exit } found == 2' "$page" > "$tmp/page"
  [ -s "$tmp/page" ] || fail "the page has no <!-- region: $name --> followed by a \`\`\`cpp block"
  diff -u --label "program: $name" --label "page: $name" "$tmp/program" "$tmp/page" >&2 ||
    fail "region '$name' differs between the program and the page (diff above)"
done
for name in $(sed -n 's/^<!-- region: \([a-z_]*\) -->$/\1/p' "$page"); do
  grep -qw "$name" <<<"$names" || fail "the page's region '$name' is not in $program"
done
echo "check_page: regions $(echo $names) are on the page word for word"
