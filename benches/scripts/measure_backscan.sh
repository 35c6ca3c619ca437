#!/bin/bash
# The backscan measurement of issue 4 (backward I/O combining), logged to
# target/measure/backscan-<name>.txt: cold forward/backward pairs at
# io_combine_limit 1, 8, 16, 32, backward combining off ("before") and on
# ("after"), O_DIRECT and buffered, 7 alternating pairs per row, on the
# 256 MiB default file. One invocation per table, so that the quiet-machine
# check runs before each: it waits (up to 300 s) until no other process uses
# more than 5% CPU (as measure_seqscan.sh), the machine's CPUs are at least
# 90% idle over a second (ps's %CPU is a lifetime average and misses a
# long-lived process that just got busy) and the disks moved less than 1 MiB
# in 2 s (other engineers' disk benchmarks use no CPU to speak of), and logs
# the busiest processes before and after. backscan itself runs a pair again
# (up to 3 times) when another process used the disks or the CPUs during it
# or the hypervisor stole CPU time (/proc/diskstats, /proc/stat), and says
# per table how often it did.
# Per-run stream statistics (--verbose) go to the same log.
# Usage: benches/scripts/measure_backscan.sh [extra backscan flags]
#        (from anywhere; runs in the workspace root)
set -u
cd "$(dirname "$0")/../.."
cargo build --release -q --bin backscan || exit 1
out=target/measure; mkdir -p "$out"
bin=./target/release/backscan
. benches/scripts/quiet.sh   # cpu_idle_pct, disk_kib, quiet
run() { # name args...
  local name=backscan-$1; shift
  quiet > "$out/$name.quiet"
  { echo "## $(date -u +%T) backscan $*"; cat "$out/$name.quiet"; ps -eo pcpu,comm --sort=-pcpu | head -4; } > "$out/$name.txt"
  $bin "$@" >> "$out/$name.txt" 2>&1
  echo "exit $?" >> "$out/$name.txt"
  { echo "## after: $(date -u +%T) load $(cat /proc/loadavg)"; ps -eo pcpu,comm --sort=-pcpu | head -4; } >> "$out/$name.txt"
  echo "== $name: backscan $*"; grep -E "^(===|io_combine|-----|[0-9]+ +\||other (disk|processes)|checksum|backscan: error|still busy)" "$out/$name.txt"
}
# Create the 256 MiB file outside any measured invocation.
$bin --pairs 1 --combine 1 --mode buffered --combining on > /dev/null || exit 1
run direct-on  --mode direct   --combining on  --pairs 7 --verbose "$@"
run direct-off --mode direct   --combining off --pairs 7 --verbose "$@"
run buffered-on  --mode buffered --combining on  --pairs 7 --verbose "$@"
run buffered-off --mode buffered --combining off --pairs 7 --verbose "$@"
# Why buffered forward beats everything else: the device's request sizes.
# Kernel read-ahead (forward only) sends MiB-sized requests; the stream's
# reads (O_DIRECT, and buffered backward, where read-ahead never starts)
# reach the disk as requests of their own size. dd stands in for the plain
# buffered forward scan; averages from /proc/diskstats of the file's disk.
probe() { # name dd-args...
  local name=$1; shift
  local f=target/pagestream-data/seqscan-256MiB.dat
  local dev; dev=$(lsblk -no pkname "$(df --output=source "$f" | tail -1)" 2>/dev/null)
  [ -n "$dev" ] || dev=$(basename "$(df --output=source "$f" | tail -1)")
  python3 -c "import os; fd=os.open('$f', os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)"
  local a b t0 t1
  a=($(awk -v d="$dev" '$3==d {print $4, $6}' /proc/diskstats)); t0=$(date +%s%N)
  dd if="$f" of=/dev/null "$@" 2>/dev/null
  t1=$(date +%s%N); b=($(awk -v d="$dev" '$3==d {print $4, $6}' /proc/diskstats))
  local n=$((b[0] - a[0]))
  echo "$name (dd $*): $(( (t1 - t0) / 1000000 )) ms, $n requests to $dev, mean $(( (b[1] - a[1]) / 2 / (n > 0 ? n : 1) )) KiB"
}
quiet > "$out/backscan-device.quiet"
{ echo "## $(date -u +%T) device request sizes, cold, 256 MiB"
  echo "read_ahead_kb=$(cat /sys/block/vda/queue/read_ahead_kb 2>/dev/null) max_sectors_kb=$(cat /sys/block/vda/queue/max_sectors_kb 2>/dev/null)"
  for i in 1 2 3; do
    probe buffered-forward bs=128k
    probe direct-128KiB bs=128k iflag=direct
    probe direct-1MiB bs=1M iflag=direct
  done; } > "$out/backscan-device.txt" 2>&1
echo "== backscan-device"; cat "$out/backscan-device.txt"
# Larger reads for the buffered backward scan (1 MiB at io_combine_limit 128).
run large-reads --combining on --combine 32,128 --pairs 7 --verbose "$@"
