#!/usr/bin/env bash
# The rolling-upgrade test (issue 32 item 5; docs/deploy.md "Upgrades"):
# builds the previous release's star and auditor (UPGRADE_FROM, a commit of
# this repository) from a copy of that commit's tree, then runs
# TestRollingUpgrade (star/e2e/verify), which starts a three-star cluster
# and its auditor on the old build and replaces them one by one with this
# tree's build under the linearizability workload.
#
#   bash .ci/upgrade.sh               (make upgrade)
#   UPGRADE_FROM=<commit> bash .ci/upgrade.sh
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
from=${UPGRADE_FROM:?UPGRADE_FROM: the commit of the previous release}
git cat-file -e "$from^{commit}" 2>/dev/null || { echo "upgrade: $from is not a commit of this repository (a shallow clone? fetch its history)"; exit 1; }

work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/old" "$work/bin"
git archive "$from" | tar -x -C "$work/old"
# The auditor process is a harness program: an old tree without it gets
# this tree's copy, built against the old tree's packages.
if [ ! -d "$work/old/star/e2e/verify/auditorproc" ]; then
  mkdir -p "$work/old/star/e2e/verify"
  cp -r star/e2e/verify/auditorproc "$work/old/star/e2e/verify/"
fi
echo "upgrade: building $(git log -1 --format='%h %s' "$from" | cut -c1-80)"
$GO build -C "$work/old" -o "$work/bin/star" ./star
$GO build -C "$work/old/star/e2e" -o "$work/bin/auditorproc" ./verify/auditorproc
cd star/e2e
$GO test -count=1 -timeout 30m -run '^TestRollingUpgrade$' -v ./verify -args -verify.upgrade-from="$work/bin" ${UPGRADE_ARGS:-}
