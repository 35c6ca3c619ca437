#!/bin/bash
# The seqscan measurement set of issue 3 (thread-pool engine; the other
# runtimes are measured by measure_runtimes.sh), logged to
# target/measure/<name>.txt.
# Before each invocation it waits (up to 300 s) for a quiet machine
# (benches/scripts/quiet.sh: no other process above 5% CPU, CPUs 90% idle,
# disks still), and it logs the busiest processes before and after.
# Usage: benches/scripts/measure_seqscan.sh   (from the workspace root)
set -u
cd "$(dirname "$0")/../.."
cargo build --release -q --bin seqscan || exit 1
out=target/measure; mkdir -p "$out"
bin=./target/release/seqscan
. benches/scripts/quiet.sh   # quiet: idle CPUs and disks
run() { # name args...
  local name=$1; shift
  quiet > "$out/$name.quiet"
  { echo "## $(date -u +%T) seqscan $*"; ps -eo pcpu,comm --sort=-pcpu | head -4; } > "$out/$name.txt"
  $bin --runtime threadpool "$@" >> "$out/$name.txt" 2>&1
  { echo "## after: $(date -u +%T) load $(cat /proc/loadavg)"; ps -eo pcpu,comm --sort=-pcpu | head -4; } >> "$out/$name.txt"
  echo "== $name: seqscan $*"; grep -E "^  [a-z]" "$out/$name.txt"
}
run all --repeat 5
run direct-cold --cache cold --direct --repeat 5
run warm-nowait-on-1 --cache warm --repeat 5 --nowait on
run warm-nowait-off-1 --cache warm --repeat 5 --nowait off
run warm-nowait-on-2 --cache warm --repeat 5 --nowait on
run warm-nowait-off-2 --cache warm --repeat 5 --nowait off
run cold-nowait-off --cache cold --repeat 5 --nowait off
run hot --cache hot --repeat 5
