#!/usr/bin/env bash
# coming_from_docs: the "coming from" pages show their program's own code.
# Each fenced block after a line "<!-- code: FILE NAME -->" in a page under
# docs/coming-from must be, line for line, the region of FILE between
# "// doc:NAME begin" and "// doc:NAME end" (less the begin line's
# indentation); after "<!-- code: FILE -->", the whole of FILE (a program
# shown as it is, e.g. rdma_lib's, which may not carry markers). Fails naming the page, the region and the first difference;
# also fails if a page marks no region (the check would mean nothing) or a
# region is missing from its file.
# Usage: tests/coming_from_docs.sh SOURCE-DIR     (meson test coming_from_docs)
set -euo pipefail
src=${1:?usage: coming_from_docs.sh SOURCE-DIR}
fail() { echo "coming_from_docs: FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d /tmp/cordma-coming-from.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
checked=0
for page in "$src"/docs/coming-from/*.md; do
  # Each marked block of the page: its marker's FILE and NAME, then its lines.
  marks=$(grep -c '^<!-- code: ' "$page" || true)
  [ "$marks" -gt 0 ] || fail "${page#$src/} marks no code region (<!-- code: FILE NAME -->)"
  for ((i = 1; i <= marks; i++)); do
    read -r file name < <(grep '^<!-- code: ' "$page" | sed -n "${i}p" | sed -E 's/^<!-- code: ([^ ]+)( ([^ ]+))? -->$/\1 \3/')
    [ -f "$src/$file" ] || fail "${page#$src/}: $file does not exist"
    awk -v n="$i" '/^<!-- code: / { k++ } k == n && /^```/ { if (in_block) exit; in_block = 1; next } k == n && in_block' \
      "$page" > "$tmp/page"
    if [ -z "$name" ]; then
      cp "$src/$file" "$tmp/code"
      name="(the whole file)"
    else
      awk -v name="$name" '
        $0 ~ "// doc:" name " begin$" { match($0, /^ */); indent = RLENGTH; on = 1; next }
        $0 ~ "// doc:" name " end$" { found = 1; exit }
        on { print substr($0, indent + 1) }
        END { if (!found) exit 1 }' "$src/$file" > "$tmp/code" ||
        fail "$file has no region \"// doc:$name begin\" ... \"// doc:$name end\""
    fi
    [ -s "$tmp/code" ] || fail "$file's region $name is empty"
    diff -u --label "$file ($name)" --label "${page#$src/}" "$tmp/code" "$tmp/page" >&2 ||
      fail "${page#$src/} shows region $name of $file differently (diff above): copy the region into the page"
    checked=$((checked + 1))
  done
done
echo "coming_from_docs: $checked regions match their programs"
