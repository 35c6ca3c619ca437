#!/bin/bash
# The backscan measurement of issue 4 (backward I/O combining), logged to
# target/measure/backscan-<name>.txt: cold forward/backward pairs at
# io_combine_limit 1, 8, 16, 32, backward combining off ("before") and on
# ("after"), O_DIRECT and buffered, 7 alternating pairs per row, on the
# 256 MiB default file. One invocation per table, so that the quiet-machine
# check runs before each: it waits (up to 300 s) until no other process uses
# more than 5% CPU, and logs the busiest processes before and after.
# Per-run stream statistics (--verbose) go to the same log.
# Usage: examples/scripts/measure_backscan.sh [extra backscan flags]
#        (from anywhere; runs in the workspace root)
set -u
cd "$(dirname "$0")/../.."
cargo build --release -q --bin backscan || exit 1
out=target/measure; mkdir -p "$out"
bin=./target/release/backscan
quiet() {
  for _ in $(seq 1 300); do
    busy=$(ps -eo pcpu,comm --sort=-pcpu | awk 'NR>1 && $1>5.0 {print $2}' | head -3 | tr '\n' ' ')
    [ -z "$busy" ] && return 0
    sleep 1
  done
  echo "still busy: $busy"
}
run() { # name args...
  local name=backscan-$1; shift
  quiet > "$out/$name.quiet"
  { echo "## $(date -u +%T) backscan $*"; cat "$out/$name.quiet"; ps -eo pcpu,comm --sort=-pcpu | head -4; } > "$out/$name.txt"
  $bin "$@" >> "$out/$name.txt" 2>&1
  echo "exit $?" >> "$out/$name.txt"
  { echo "## after: $(date -u +%T) load $(cat /proc/loadavg)"; ps -eo pcpu,comm --sort=-pcpu | head -4; } >> "$out/$name.txt"
  echo "== $name: backscan $*"; grep -E "^(===|io_combine|-----|[0-9]+ +\||checksum|backscan: error|still busy)" "$out/$name.txt"
}
# Create the 256 MiB file outside any measured invocation.
$bin --pairs 1 --combine 1 --mode buffered --combining on > /dev/null || exit 1
run direct-on  --mode direct   --combining on  --pairs 7 --verbose "$@"
run direct-off --mode direct   --combining off --pairs 7 --verbose "$@"
run buffered-on  --mode buffered --combining on  --pairs 7 --verbose "$@"
run buffered-off --mode buffered --combining off --pairs 7 --verbose "$@"
