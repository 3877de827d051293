#!/usr/bin/env bash
# scripts/bench.sh — measure every backend in one run, so ratios between
# them and against each store's raw floor hold on a noisy machine.
#
#   scripts/bench.sh                 # default: 16 clients, 1 and 1000 keys, 5 s each
#   DURATION=2s CLIENTS=8 scripts/bench.sh
#   scripts/bench.sh --json          # machine-readable, one JSON object per run
#
# Backends whose servers this script can start on loopback are added here
# as their crates land; today: mem:// and file://.
set -euo pipefail

script_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
cd "$script_dir/.."

DURATION=${DURATION:-5s}
CLIENTS=${CLIENTS:-16}
extra=("$@")

cargo build -q --release -p distlock-cli
bin="${CARGO_TARGET_DIR:-target}/release/distlock"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() {
    local label=$1 url=$2 keys=$3
    printf '\n=== %s, %s clients, %s key(s), %s ===\n' "$label" "$CLIENTS" "$keys" "$DURATION"
    "$bin" --url "$url" bench --clients "$CLIENTS" --keys "$keys" --duration "$DURATION" "${extra[@]}"
}

printf 'distlock bench on %s (%s cores), %s\n' "$(uname -srm)" "$(nproc)" "$(date -u +%FT%TZ)"
for keys in 1 1000; do
    run "file" "file://$work/file" "$keys"
    run "mem" "mem://bench" "$keys"
done
