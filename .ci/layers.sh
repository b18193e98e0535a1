#!/usr/bin/env bash
# The package layers (make lint): product code never imports a harness
# (star/sim, the star/e2e module), not even from its tests, and never
# imports upward: shared/ is the bottom layer, star/ sits on it, and
# functions/ (the Lambda entry points around star/auditor) on both.
set -euo pipefail
cd "$(dirname "$0")/.."
mod=github.com/starlog/starlog
# One line a package: its path, its imports, "|", its tests' imports.
bad=$(go list -f '{{.ImportPath}} {{join .Imports " "}} | {{join .TestImports " "}} {{join .XTestImports " "}}' ./... | awk -v m="$mod" '
{
  pkg = $1; tests = 0
  for (i = 2; i <= NF; i++) {
    imp = $i
    if (imp == "|") { tests = 1; continue }
    if (index(imp, m "/") != 1) continue
    harness = index(imp, m "/star/sim/") == 1 || index(imp, m "/star/e2e/") == 1
    if (harness && index(pkg, m "/star/sim/") != 1) { print pkg " imports the harness " imp; continue }
    if (tests) continue
    if (index(pkg "/", m "/shared/") == 1 && (index(imp, m "/star/") == 1 || index(imp, m "/functions/") == 1)) print pkg " (shared) imports " imp
    if (index(pkg "/", m "/star/") == 1 && index(imp, m "/functions/") == 1) print pkg " (star) imports " imp
  }
}' | sort -u)
if [ -n "$bad" ]; then
  echo "package layering broken:"; echo "$bad"; exit 1
fi
echo "layers: ok ($(go list ./... | wc -l) packages; no harness imported by product code, nothing imports upward)"
