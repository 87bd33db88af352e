#!/usr/bin/env bash
# Checks that a binary holds the fault-injection machinery (core/fault.hpp) exactly when it was
# built with PARARNN_FAULTS=ON: its symbol pararnn::fault::active and its announcement text.
# Usage: scripts/check-fault-points.sh <binary> absent|present
set -euo pipefail
binary=$1 expect=$2
found=absent
if nm -C "$binary" | grep -q 'pararnn::fault::active' || grep -q "pararnn fault '%s' injected" "$binary"; then
  found=present
fi
if [ "$found" != "$expect" ]; then
  echo "check-fault-points: fault points $found in $binary, expected $expect"
  exit 1
fi
echo "check-fault-points: fault points $found in $binary, as expected"
