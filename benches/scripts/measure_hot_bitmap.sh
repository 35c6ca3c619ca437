#!/bin/bash
# Issue 7's hot path and bitmap heap scan, logged to target/measure/:
# - hot-prefetch: seqscan --cache hot on the 1 GiB default file, 7 repeats of
#   the in-memory loop, the stream with and without page prefetch (order
#   reversed every other repeat); the summary gives ns/page and overhead;
# - bitmap-*: bitmapscan on the same file, cold, max_ios 0…16 × read-ahead
#   on / off / O_DIRECT, 5 interleaved repeats, uniform at densities 0.001
#   and 0.01 and clustered at 0.05.
# Each invocation waits for a quiet machine and takes the measurement lock
# (benches/scripts/quiet.sh).
# Usage: benches/scripts/measure_hot_bitmap.sh   (runs in the workspace root)
set -u
cd "$(dirname "$0")/../.."
. benches/scripts/quiet.sh
cargo build --release -q --bin seqscan --bin bitmapscan || exit 1
# Create the data file outside any measured invocation.
./target/release/seqscan --runtime threadpool --cache hot --no-memory-loop --prefetch off > /dev/null || exit 1
measured hot-prefetch ./target/release/seqscan --runtime threadpool --cache hot --repeat 7
grep -E "^  [a-z]" target/measure/hot-prefetch.txt
for args in "uniform 0.001" "uniform 0.01" "clustered 0.05"; do
  set -- $args
  measured "bitmap-$1-$2" ./target/release/bitmapscan --pattern "$1" --density "$2" --repeat 5
  grep -vE "^\.+$" "target/measure/bitmap-$1-$2.txt" | grep -E "^( +[0-9]|max_ios|bitmapscan|[0-9]+ tuples)"
done
