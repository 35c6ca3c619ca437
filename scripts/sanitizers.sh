#!/usr/bin/env bash
# Runs test suites under the nightly toolchain's sanitizers:
#
#   scripts/sanitizers.sh [asan|tsan|valgrind|all] [PACKAGE...]
#
# asan: AddressSanitizer over the core's tests (unit, integration, the
#       simulation) and the thread-pool and io_uring engines' tests, with all
#       features (default packages: pagestream pagestream-threadpool
#       pagestream-uring).
# tsan: ThreadSanitizer over the core's tests (the pool's atomics, the
#       stream's mailbox and wake-ups), the thread-pool engine's (its
#       queues, helper thread and AIO reaper) and the io_uring engine's, all
#       features (its driver shared between threads, uring-tokio's reaper).
# valgrind: memcheck over the core's and the thread-pool engine's test
#       binaries (stable toolchain, debug build). Not the io_uring engines:
#       valgrind does not know what io_uring's kernel writes define. (It
#       does not know native AIO's IOCB_CMD_PREADV either: it warns
#       "unhandled io_getevents opcode" and cannot mark what those reads
#       wrote as defined, which could only add false reports.)
#       Property tests run PROPTEST_CASES=16 cases each, the simulation
#       PAGESTREAM_SIM_SEEDS=100 seeds (valgrind runs code ~30x slower).
#
# ThreadSanitizer rebuilds std with the sanitizer (`-Zbuild-std`, which
# needs the nightly `rust-src` component: the script adds it), so that it
# sees the synchronisation inside std; AddressSanitizer uses std as shipped
# (its allocator is intercepted either way). Leak detection is off: tests leak
# streams and guards on purpose (`mem::forget`) to show that nothing under
# the kernel depends on a destructor running. io_uring's kernel-side writes
# are invisible to both sanitizers (they see the reads that follow).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-all}
shift || true
packages=("$@")
tsan_packages=("$@")
valgrind_packages=("$@")
[ ${#packages[@]} -gt 0 ] || packages=(pagestream pagestream-threadpool pagestream-uring)
[ ${#tsan_packages[@]} -gt 0 ] || tsan_packages=(pagestream pagestream-threadpool pagestream-uring)
[ ${#valgrind_packages[@]} -gt 0 ] || valgrind_packages=(pagestream pagestream-threadpool)
host=$(rustc +nightly -vV | sed -n 's/^host: //p')

run() {
    local san=$1 dir=$2
    shift 2
    local std=()
    if [ "$san" = thread ]; then
        rustup component add rust-src --toolchain nightly >/dev/null
        std=(-Zbuild-std)
    fi
    for p in "$@"; do
        echo "=== $san: $p"
        # --target: build scripts and proc-macros stay uninstrumented.
        RUSTFLAGS="-Zsanitizer=$san" \
        RUSTDOCFLAGS="-Zsanitizer=$san" \
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" \
        TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1" \
        CARGO_TARGET_DIR="target/$dir" \
            cargo +nightly test "${std[@]}" --target "$host" -p "$p" --all-features --lib --tests
    done
}

# Under valgrind, POSIX_FADV_DONTNEED leaves pages of the file that mincore
# reports resident, so the thread-pool tests that first make a file cold
# (adapters/threadpool/tests/common: evict) cannot start; they are skipped.
valgrind_skip=(
    --skip a_buffered_backward_scan_reads_ahead_below_itself
    --skip advised_reads_are_queued_primed_and_read_correctly
    --skip blocking_inline_reads_on_the_calling_thread
    --skip cold_reads_are_correct_inline_or_on_threads
    --skip random_advice_file_gets_willneed_advice_and_reads_correctly
    --skip unadvised_reads_are_not_primed
)

# Every test binary of the packages, each under valgrind's memcheck.
memcheck() {
    command -v valgrind >/dev/null || { echo "valgrind is not installed (Debian: apt-get install -y valgrind)" >&2; exit 2; }
    for p in "$@"; do
        echo "=== valgrind: $p"
        local bins
        bins=$(CARGO_TARGET_DIR=target/valgrind cargo test -p "$p" --all-features --lib --tests --no-run \
            --message-format=json | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p')
        for b in $bins; do
            echo "--- $b"
            PROPTEST_CASES=16 PAGESTREAM_SIM_SEEDS=100 \
                valgrind --quiet --error-exitcode=99 --leak-check=no --track-origins=yes \
                "$b" --test-threads=2 "${valgrind_skip[@]}"
        done
    done
}

case $mode in
    asan) run address asan "${packages[@]}" ;;
    tsan) run thread tsan "${tsan_packages[@]}" ;;
    valgrind) memcheck "${valgrind_packages[@]}" ;;
    all)
        run address asan "${packages[@]}"
        run thread tsan "${tsan_packages[@]}"
        memcheck "${valgrind_packages[@]}"
        ;;
    *)
        echo "usage: $0 [asan|tsan|valgrind|all] [PACKAGE...]" >&2
        exit 2
        ;;
esac
