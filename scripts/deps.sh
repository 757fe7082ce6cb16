#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages odafs builds with, only those missing. Idempotent.
#   bash scripts/deps.sh [PACKAGE...]   # and these too (what a benchmark needs beyond)
set -euo pipefail

# openssl: the command, for scripts/make-test-ca.sh (the TLS tests' certificates).
# libcli11-dev: the odafs tool's options and subcommands (header-only).
# libmicrohttpd-dev: odafsd --metrics' HTTP endpoint.
# nlohmann-json3-dev: the benchmark programs' JSON (header-only).
packages=(cmake ninja-build g++ pkg-config libtirpc-dev rpcsvc-proto libssl-dev openssl
          libboost-dev doctest-dev libfuse3-dev fuse3 rsync libdb5.3++-dev libibverbs-dev
          librdmacm-dev libcli11-dev libmicrohttpd-dev nlohmann-json3-dev "$@")
# The fuzz targets need clang's libFuzzer (scripts/fuzz.sh sets ODAFS_WITH_CLANG=1).
if [ "${ODAFS_WITH_CLANG:-0}" = 1 ]; then
  packages+=(clang libclang-rt-14-dev)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
