#!/usr/bin/env bash
# Runs each fuzz target for a while (cargo fuzz, nightly; AddressSanitizer):
#
#   scripts/fuzz.sh SECONDS [TARGET...]
#
# Targets (fuzz/fuzz_targets): stream_oracle (one stream driven by the
# fuzzer's block sequence and completion order, against the naive reader)
# heap_page (pgcount's heap-page parser: no panic, no read outside the
# page, both line-pointer orders agree) and values (the programs' sizes,
# durations, counts and limits: no panic, values read back, errors name
# what they refuse). Default: all.
# Each starts from its seed corpus in fuzz/corpus/TARGET (in git) and the
# inputs earlier runs found (fuzz/target/found/TARGET, not in git), adding
# what it finds to the latter; a crash is saved in fuzz/artifacts/TARGET and
# the run fails.
# Needs `cargo install cargo-fuzz`.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=${1:?usage: $0 SECONDS [TARGET...]}
shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(stream_oracle heap_page values)
command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz is not installed: cargo install cargo-fuzz" >&2; exit 2; }
for t in "${targets[@]}"; do
    echo "=== $t for ${seconds}s"
    mkdir -p "target/found/$t"
    cargo +nightly fuzz run "$t" "target/found/$t" "corpus/$t" -- \
        -max_total_time="$seconds" -print_final_stats=1
done
