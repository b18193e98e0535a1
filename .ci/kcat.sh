#!/usr/bin/env bash
# kcat (librdkafka's command-line client), pinned to the Debian package
# version the Kafka face's librdkafka tests run (star/servecmd
# kcat_test.go; docs/kafka.md "Checked by"). Called by `make tools`.
# Installing needs root (or sudo without a password); without either it
# says what to run and fails, as a missing test service does.
set -euo pipefail
want=1.7.1-2
have=$(dpkg-query -W -f='${Version}' kcat 2>/dev/null || true)
if [ "$have" = "$want" ]; then
  exit 0
fi
sudo=
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo="sudo -n"
  else
    echo "kcat $want is not installed (installed: ${have:-none}), and installing it needs root:" >&2
    echo "  sudo apt-get install -y kcat=$want" >&2
    exit 1
  fi
fi
echo "installing kcat $want (installed: ${have:-none})"
$sudo apt-get install -y "kcat=$want" || { $sudo apt-get update && $sudo apt-get install -y "kcat=$want"; }
