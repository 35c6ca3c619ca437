#!/usr/bin/env bash
# Runs test suites under the nightly toolchain's sanitizers:
#
#   scripts/sanitizers.sh [asan|tsan|all] [PACKAGE...]
#
# asan: AddressSanitizer over the core's tests (unit, integration, the
#       simulation) and the thread-pool and io_uring engines' tests, with all
#       features (default packages: pagestream pagestream-threadpool
#       pagestream-uring).
# tsan: ThreadSanitizer over the core's tests (the pool's atomics, the
#       stream's mailbox and wake-ups).
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
[ ${#packages[@]} -gt 0 ] || packages=(pagestream pagestream-threadpool pagestream-uring)
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

case $mode in
    asan) run address asan "${packages[@]}" ;;
    tsan) run thread tsan pagestream ;;
    all)
        run address asan "${packages[@]}"
        run thread tsan pagestream
        ;;
    *)
        echo "usage: $0 [asan|tsan|all] [PACKAGE...]" >&2
        exit 2
        ;;
esac
