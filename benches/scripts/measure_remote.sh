#!/bin/bash
# The remote measurement of issue 6 (remote storage on a small pool),
# logged to target/measure/remote-<name>.txt:
#   one       the one-at-a-time reader, --repeat 5, JSON (remote-one.json)
#   streams   every pagestream row on the 1 MiB pool (128 frames), 0.2 ms
#             per read, max_ios 100, 3000 pages, --repeat 11, JSON
#             (remote-streams.json); these two are invoked again (up to 6
#             times in all) while disturbed: other processes used more than
#             half a CPU-second, steal exceeded 10% of the CPUs, or a combine
#             row kept a run whose storage was late (remote runs a run again
#             when its storage missed 0.2 ms by more than 10%; a run still
#             late after that was disturbed)
#   ramp      reads in flight per round trip (deterministic)
#   park      the single-stream and parallel rows with the consumer thread
#             sleeping while it waits (--executor park) instead of spinning:
#             what the timer thread's wake-ups cost the simulation
#   full      the single-stream rows starting at full distance (--full):
#             what the distance ramp costs
#   lookahead the synchronized scans with positions reported from the
#             look-ahead (PostgreSQL 17's report point) instead of the
#             consumer
#   pools     the synchronized scans on larger pools: where the storage
#             reads per page drop to the issue's 1.2
# Every invocation first waits for a quiet machine (benches/scripts/quiet.sh;
# the timer thread and the consumer need both cores), and logs the busiest processes before and
# after and what other processes used of the CPUs during the run
# (/proc/stat minus remote's own time). The whole measurement holds
# /tmp/pagestream-measure.lock, which the other measurement scripts take too.
# Usage: benches/scripts/measure_remote.sh [extra remote flags]
#        (from anywhere; runs in the workspace root)
set -u
cd "$(dirname "$0")/../.."
cargo build --release -q --bin remote || exit 1
out=target/measure; mkdir -p "$out"
bin=./target/release/remote
exec 9> /tmp/pagestream-measure.lock
flock 9
. benches/scripts/quiet.sh   # quiet: idle CPUs and disks
run() { # name args...
  local name=remote-$1; shift
  quiet > "$out/$name.quiet"
  { echo "## $(date -u +%T) $(git rev-parse --short HEAD) remote $*"; cat "$out/$name.quiet"
    echo "load $(cat /proc/loadavg)"; ps -eo pcpu,comm --sort=-pcpu | head -4; } > "$out/$name.txt"
  local a b rc
  a=($(head -1 /proc/stat))
  /usr/bin/time -f "%e %U %S" -o "$out/$name.time" $bin "$@" >> "$out/$name.txt" 2>&1
  rc=$?
  b=($(head -1 /proc/stat))
  echo "exit $rc" >> "$out/$name.txt"
  # What else ran: all CPUs' busy time (user nice system irq softirq, in
  # clock ticks) minus remote's own user + system time; and the time the
  # hypervisor took from the VM's CPUs (steal).
  local tck busy steal
  tck=$(getconf CLK_TCK)
  busy=$(( b[1]-a[1] + b[2]-a[2] + b[3]-a[3] + b[6]-a[6] + b[7]-a[7] ))
  steal=$(( b[8]-a[8] ))
  read -r wall usr sys < "$out/$name.time"
  awk -v busy="$busy" -v steal="$steal" -v tck="$tck" -v wall="$wall" -v usr="$usr" -v sys="$sys" 'BEGIN {
    printf "cpu: remote used %.2f s (user %.2f, system %.2f) in %.2f s wall; other processes %.2f CPU-s; steal %.2f s\n",
      usr + sys, usr, sys, wall, busy / tck - usr - sys, steal / tck }' >> "$out/$name.txt"
  { echo "## after: $(date -u +%T) load $(cat /proc/loadavg)"; ps -eo pcpu,comm --sort=-pcpu | head -4; } >> "$out/$name.txt"
  echo "== $name: remote $*"; grep -vE "^ +[0-9.]+ +[a-z]|^%CPU|^\{" "$out/$name.txt"
}
# Whether an invocation was disturbed: other processes used more than half
# a CPU-second during it, or the hypervisor took more than 10% of the CPUs
# (steal; a few percent is this VM's normal), or a kept run of the rows the issue holds to 1.3x of the ideal
# (combine1, combine16) had storage still late after remote's own retries.
disturbed() { # log
  local late
  late=$(grep '^{' "$1" | grep -E '"row":"(combine1|combine16)"' |
    awk '{ match($0, /"runs":[0-9]+/); r = substr($0, RSTART + 7, RLENGTH - 7)
           match($0, /"latency_ok_runs":[0-9]+/); k = substr($0, RSTART + 18, RLENGTH - 18)
           if (k != r) n++ } END { print n + 0 }')
  awk -v late="$late" -v ncpu="$(nproc)" '/^cpu: / { for (i = 1; i <= NF; i++) {
      if ($i == "processes") o = $(i + 1); if ($i == "steal") st = $(i + 1); if ($i == "wall;") w = $(i - 2) } }
    END { sf = w > 0 ? st / (w * ncpu) : 0
          printf "%s", (late > 0 || o > 0.5 || sf > 0.10) ? "yes" : "no"
          printf " (combine rows with late storage: %d, other processes %.2f CPU-s, steal %.2f s = %.1f%% of the CPUs)\n", late, o, st, 100 * sf }' "$1"
}
headline() { # name args...: run again (up to 6 times in all) while disturbed
  local base=$1 name try d; shift
  for try in 1 2 3 4 5 6; do
    name=$base; [ "$try" -gt 1 ] && name=$base-try$try
    run "$name" "$@"
    d=$(disturbed "$out/remote-$name.txt")
    echo "disturbed: $d" | tee -a "$out/remote-$name.txt"
    case $d in no*) break ;; esac
  done
  grep '^{' "$out/remote-$name.txt" > "$out/remote-$base.json"
}
# The headline figures, in two invocations so that each is short (a build
# starting on the machine spoils a long one): the one-at-a-time reader
# (0.6 s a run), then every pagestream row.
headline one --repeat 5 --rows one-at-a-time --json "$@"
headline streams --repeat 11 --rows combine1,combine16,sync-on,sync-off,parallel --json "$@"
run ramp --repeat 1 --ramp --rows combine1,combine16 "$@"
run park --repeat 5 --executor park --rows one-at-a-time,combine1,combine16,parallel "$@"
run full --repeat 5 --full --ramp --rows combine1,combine16 "$@"
run lookahead --repeat 5 --rows sync-on --sync-report lookahead "$@"
for f in 256 1024 2048 2999 3000 4096; do
  run "pools-$f" --repeat 3 --rows sync-on --pool-frames "$f" "$@"
done
