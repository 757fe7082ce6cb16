#!/usr/bin/env bash
# Configures and builds one flavour of odafs: build.sh DIR [cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$1
shift
cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
ninja -C "$dir"
