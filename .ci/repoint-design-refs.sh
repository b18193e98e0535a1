#!/usr/bin/env bash
# Repoints the references to the design notes kept outside the repository
# at docs/design.md, in every tracked *.go and *.md file and the Makefile
# (a one-off, run by the lead after merging; running it again changes
# nothing). Then .ci/docrefs.sh passes:
#   DESIGN §n                      -> docs/design.md §n
#   DESIGN §10's defaults          -> the defaults of docs/design.md §13
#   API.md §1 / §3 / §5            -> docs/design.md §16.1 / §16.2 / §16.3
#   the design's API.md, API.md    -> docs/design.md §16
#   seeds/write-path.md            -> docs/design.md §6
#   seeds/settlement.md            -> docs/design.md §10
# and the mentions of the seed pages in docs/*.md.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only regular files that mention a candidate (sed -i would replace a link).
mapfile -t files < <(git ls-files '*.go' '*.md' Makefile | while read -r f; do [ -f "$f" ] && [ ! -L "$f" ] && echo "$f"; done |
  xargs -r grep -lE 'DESIGN|API\.md|seeds/|seed page|seed.s|the seed\)' || true)

lines=$(mktemp)
whole=$(mktemp)
trap 'rm -f "$lines" "$whole"' EXIT

# Line by line, most specific first.
cat >"$lines" <<'EOF'
s/DESIGN §6, seeds\/write-path\.md/docs\/design.md §6/g
s/DESIGN §10, seeds\/settlement\.md/docs\/design.md §10/g
s/seeds\/write-path\.md/docs\/design.md §6/g
s/seeds\/settlement\.md/docs\/design.md §10/g
s/DESIGN §10's defaults/the defaults of docs\/design.md §13/g
s/DESIGN §/docs\/design.md §/g
s/the design's API\.md/docs\/design.md §16/g
s/The design authority is `API\.md` in the design notes/The semantics it follows are in docs\/design.md §16/g
s/API\.md only bounds/docs\/design.md §16.1: S2 only bounds/g
s/API\.md §1([^0-9.]|$)/docs\/design.md §16.1\1/g
s/API\.md §3([^0-9.]|$)/docs\/design.md §16.2\1/g
s/API\.md §5([^0-9.]|$)/docs\/design.md §16.3\1/g
s/(^|[^A-Za-z\/])API\.md/\1docs\/design.md §16/g
s/docs\/design.md §11 and the seed's "reclamation and retention"/docs\/design.md §11/g
s/Before decommission it stays \(the seed\)/Before decommission it stays (docs\/design.md §11)/g
s/trigger plus a linger's worth of appends, as the seed says/trigger plus a linger's worth of appends, as docs\/design.md §10 says/g
s/\(1,024 flights and 1 GiB, the seed's default\)/(1,024 flights and 1 GiB, the first default, docs\/design.md §6)/g
s/\| the seed's defaults \|/| the first defaults, kept (docs\/design.md §13) |/g
s/the seed's 1024 held it/the first default, 1,024, held it/g
s/the seed's tens of metastore operations per second per star/the tens of metastore operations a second per star of docs\/design.md §5/g
EOF

# Across lines: the opening sentences of docs/write-path.md and docs/settle.md.
cat >"$whole" <<'EOF'
s/implements the seed page \*Write path\* and the\ndesign's §6–§7, and records the decisions the design left open\./implements docs\/design.md §6–§7 (the write\npath, epochs and the chain) and records the decisions left open there./g
s/implements the seed page \*Settlement\*\n\(group settle, catalog commit, trim-check\) and docs\/design.md §5, §7, §10, §11, and\nrecords the decisions those pages left open\./implements settlement\n(group settle, catalog commit, trim-check) as docs\/design.md §5, §7, §10, §11\ndescribe it, and records the decisions left open there./g
EOF

changed=0
for f in "${files[@]}"; do
  before=$(cksum <"$f")
  sed -i -E -f "$lines" "$f"
  sed -i -z -E -f "$whole" "$f"
  if [ "$(cksum <"$f")" != "$before" ]; then
    echo "repointed: $f"; changed=$((changed + 1))
  fi
done
echo "repoint-design-refs: $changed files changed"
