#!/bin/bash
# Issue 8's measurement: pagestream-bench's report and micro-benchmarks on a
# quiet machine. Each step runs under `flock /tmp/pagestream-measure.lock`
# (the lock every measurement script on this machine takes) and, holding it,
# first waits (up to 300 s) until no other process uses more than 5% CPU,
# the CPUs are at least 90% idle over a second and the disks moved less
# than 1 MiB in 2 s (as benches/scripts/measure_backscan.sh), logging the
# busiest processes before and after. Logs go to target/measure/bench-*.txt.
#
# Usage: benches/scripts/measure_bench.sh [STEP...]     (from anywhere)
#   quick       pagestream-bench report --quick   -> target/bench-report/
#   micro       cargo bench -p pagestream-bench --bench micro
#   full        pagestream-bench report           -> target/bench-report-full/
#   full:LIST   the full report's sections LIST only (e.g. full:1,4)
#               -> target/bench-report-full-LIST/ (one step per lock: run
#               full:1 full:2 … to let other measurements in between)
# Default: quick micro.
set -u
cd "$(dirname "$0")/../.."
lock=/tmp/pagestream-measure.lock
out=target/measure
. benches/scripts/quiet.sh   # cpu_idle_pct, disk_kib, quiet
if [ "${1:-}" = "--step" ]; then # under the lock: wait for quiet, run, log
  name=$2; shift 2
  log=$out/bench-$name.txt
  { echo "## $(date -u +%T) $*"; quiet; echo "load $(cat /proc/loadavg)"; ps -eo pcpu,comm --sort=-pcpu | head -4; } > "$log"
  start=$(date +%s)
  "$@" >> "$log" 2>&1
  rc=$?
  { echo "exit $rc after $(( $(date +%s) - start )) s"; echo "## after: $(date -u +%T) load $(cat /proc/loadavg)"; ps -eo pcpu,comm --sort=-pcpu | head -4; } >> "$log"
  exit $rc
fi
mkdir -p "$out"
cargo build --release -q -p pagestream-bench --bin pagestream-bench || exit 1
cargo bench -q -p pagestream-bench --bench micro --no-run 2> /dev/null || exit 1
bin=./target/release/pagestream-bench
# Create the data files outside any measured step.
for size in 16MiB 32MiB 64MiB 128MiB 1GiB; do
  [ -f target/pagestream-data/seqscan-$size.dat ] ||
    $bin scan --engine pread-loop --pattern bitmap:0.001 --cache warm --size $size --json > /dev/null || exit 1
done
[ $# -gt 0 ] || set -- quick micro
for step in "$@"; do
  case $step in
    quick) args=(report --quick) ;;
    full) args=(report --out target/bench-report-full) ;;
    full:*) args=(report --out "target/bench-report-full-${step#full:}" --only "${step#full:}") ;;
    micro) args=() ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
  name=${step//[:,]/-}
  echo "== $(date -u +%T) $step (waiting for $lock and a quiet machine)"
  if [ "$step" = micro ]; then
    flock "$lock" "$0" --step "$name" cargo bench -q -p pagestream-bench --bench micro
  else
    flock "$lock" "$0" --step "$name" "$bin" "${args[@]}"
  fi
  echo "== $(date -u +%T) $step: exit $?, log $out/bench-$name.txt"
  tail -4 "$out/bench-$name.txt"
done
