#!/bin/bash
# prewarm (issue 7): load the 1 GiB default file into a pool that holds it,
# full(true) (READ_STREAM_FULL, no distance ramp) against full off, cold
# buffered, cold O_DIRECT and warm, on the thread-pool engine: 5 loads each,
# on and off alternating invocation by invocation. Each invocation waits for
# a quiet machine and takes the measurement lock (quiet.sh); logs in
# target/measure/prewarm-*.txt, medians printed at the end.
# Usage: benches/scripts/measure_prewarm.sh   (from anywhere)
set -u
cd "$(dirname "$0")/../.."
. benches/scripts/quiet.sh
cargo build --release -q --bin prewarm || exit 1
./target/release/prewarm --cache none > /dev/null || exit 1   # creates the file if absent
for rep in 1 2 3 4 5; do
  for mode in "cold" "cold --direct" "warm"; do
    for full in on off; do
      name="prewarm-$(echo "$mode" | tr -d ' -')-$full-$rep"
      measured "$name" ./target/release/prewarm --cache $mode --full $full --json > /dev/null
    done
  done
done
python3 - <<'PY'
import glob, json, statistics, re
rows = {}
for f in glob.glob("target/measure/prewarm-*-*-[0-9].txt"):
    m = re.match(r".*/prewarm-(\w+)-(on|off)-\d\.txt", f)
    for line in open(f):
        if line.startswith("{"):
            j = json.loads(line)
            rows.setdefault((m.group(1), m.group(2)), []).append(j)
for (mode, full), js in sorted(rows.items()):
    v = [j["mib_per_s"] for j in js]
    print(f"{mode:10} full {full:3}: {statistics.median(v):8.1f} MiB/s ({min(v):.1f}–{max(v):.1f}), "
          f"{len(v)} loads, reads {js[0]['reads']} x {js[0]['mean_blocks_per_read']:.2f}, "
          f"max in flight {max(j['max_in_flight'] for j in js)}")
PY
