#!/usr/bin/env bash
# Dangling document references (make lint): a Go comment or a doc of the
# repository (every tracked *.go and *.md, and the Makefile) may cite only
# documents the repository holds. Refused, with file:line each:
#   - the design notes and seed pages kept outside the repository: the
#     word DESIGN, API.md, STYLE.md, seeds/<page>.md, "the seed page",
#     "the design's §n" (the design is docs/design.md;
#     .ci/repoint-design-refs.sh rewrites the old forms);
#   - a docs/<name>.md path with no such file;
#   - docs/design.md §n (and the §m, §k listed after it) where the page has
#     no section n (its headings "## 9. Leadership", "### 16.1 …").
set -euo pipefail
cd "$(dirname "$0")/.."
design=docs/design.md
sections=""
if [ -f "$design" ]; then
  sections=$(grep -oE '^#{2,4} [0-9]+(\.[0-9]+)*' "$design" | awk '{print $2}' | tr '\n' ' ')
fi
docs=$(find docs -name '*.md' 2>/dev/null | sort | tr '\n' ' ')
# Tracked files that exist (a deletion not yet committed is skipped).
mapfile -t files < <(git ls-files '*.go' '*.md' Makefile | while read -r f; do [ -f "$f" ] && echo "$f"; done)
bad=$(awk -v sections=" $sections " -v docs=" $docs " '
function report(msg) { printf "%s:%d: %s\n", FILENAME, FNR, msg }
{
  line = $0
  if (match(line, /(^|[^A-Za-z0-9_])DESIGN([^A-Za-z0-9_]|$)/)) report("cites DESIGN, the design notes outside the repository (use docs/design.md)")
  if (index(line, "API.md")) report("cites API.md, outside the repository (use docs/design.md §16 or docs/api.md)")
  if (index(line, "STYLE.md")) report("cites STYLE.md, outside the repository")
  if (match(line, /seeds\/[A-Za-z0-9_.-]+\.md/)) report("cites " substr(line, RSTART, RLENGTH) ", outside the repository (use docs/design.md)")
  if (match(line, /[Ss]eed page|the design'"'"'s (§|API)/)) report("cites \"" substr(line, RSTART, RLENGTH) "\", outside the repository (use docs/design.md)")
  # docs/<name>.md paths, not inside a longer path or a URL.
  rest = line
  while (match(rest, /docs\/[A-Za-z0-9_.\/-]*[A-Za-z0-9_-]\.md/)) {
    path = substr(rest, RSTART, RLENGTH)
    before = RSTART > 1 ? substr(rest, RSTART - 1, 1) : ""
    after = substr(rest, RSTART + RLENGTH)
    rest = after
    if (before ~ /[A-Za-z0-9_.\/-]/) continue
    if (index(docs, " " path " ") == 0) { report("cites " path ", which the repository does not have"); continue }
    if (path != "docs/design.md") continue
    # The sections listed after docs/design.md: "§9", "§5, §7 and §10", "§6–§7".
    while (match(after, /^(,? and |, |–| |-)?§[0-9]+(\.[0-9]+)*/)) {
      ref = substr(after, RSTART, RLENGTH)
      after = substr(after, RSTART + RLENGTH)
      sub(/^[^§]*§/, "", ref)
      if (index(sections, " " ref " ") == 0) report("cites docs/design.md §" ref ", which the page does not have")
    }
  }
}' "${files[@]}")
if [ -n "$bad" ]; then
  echo "dangling document references:"; echo "$bad"; exit 1
fi
echo "docrefs: ok (${#files[@]} files; docs/design.md sections: $(echo $sections | wc -w))"
