#!/usr/bin/env bash
# Soaks every engine in turn: 64 streams on a small pool over a stamped
# file, with random drops, resets, timeouts, closes and guards kept past
# their stream, every page verified, RSS and open descriptors sampled
# (`pagestream-bench soak`, see its --help):
#
#   scripts/soak.sh DURATION [RUNTIME,...] [-- SOAK-FLAGS...]
#
# DURATION is per runtime (30s, 10m, 1h). RUNTIMES default to all six:
# threadpool, tokio-uring, glommio, uring, uring-tokio and object-store
# (served by nginx on loopback; Debian: apt-get install -y nginx). Prints a
# line per runtime and writes them as JSON to target/soak/soak-<time>.json.
# Fails on the first runtime that loses or corrupts a page, hangs, leaves
# a descriptor open or grows its RSS.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:?usage: $0 DURATION [RUNTIME,...] [-- SOAK-FLAGS...]}
shift
runtimes=threadpool,tokio-uring,glommio,uring,uring-tokio,object-store
if [ $# -gt 0 ] && [ "$1" != "--" ]; then runtimes=$1; shift; fi
[ "${1:-}" != "--" ] || shift
cargo build --release -q -p pagestream-bench
mkdir -p target/soak
out=target/soak/soak-$(date -u +%Y%m%dT%H%M%SZ).json
IFS=, read -ra list <<< "$runtimes"
for rt in "${list[@]}"; do
    # One process per runtime: its RSS and descriptors are its own.
    target/release/pagestream-bench soak --runtime "$rt" --duration "$duration" --json "$@" \
        | tee -a "$out"
done
echo "results: $out"
