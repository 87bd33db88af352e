#!/usr/bin/env bash
# Installs the Debian packages pararnn builds against. Idempotent: apt-get runs only when a
# package is missing, and `apt-get update` only when a first install attempt fails.
set -euo pipefail
packages=(cmake ninja-build g++ pkg-config libeigen3-dev libboost-dev libmpfr-dev libgmp-dev
          librapidcheck-dev libgtest-dev nlohmann-json3-dev libcli11-dev libfmt-dev
          libdlpack-dev libspdlog-dev
          libpugixml-dev  # tests only: parses back the JUnit XML of `report nightly --junit`
          gnuplot-nox fonts-liberation)  # report figures: gnuplot's svg and pngcairo terminals, a font
# The fuzz build (scripts/fuzz.sh) also needs clang-14 and its libFuzzer/sanitizer runtimes.
[ "${PARARNN_DEPS_FUZZ:-0}" = 1 ] && packages+=(clang-14 libclang-rt-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing ${missing[*]}"
if ! "${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${missing[@]}"; then
  "${sudo_cmd[@]}" apt-get update
  "${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
fi
