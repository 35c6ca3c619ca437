//! The deterministic simulation (`pagestream::testing::sim`) over many
//! seeds. `PAGESTREAM_SIM_SEEDS` sets how many (default 1,000),
//! `PAGESTREAM_SIM_SEED` the first (default 0); a failure, or a panic inside
//! a run, names its seed and the command that replays it.

use pagestream::testing::sim;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::Instant;

fn env(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?}: expected a whole number")),
        Err(_) => default,
    }
}

#[test]
fn seeds_keep_the_oracle() {
    let first = env("PAGESTREAM_SIM_SEED", 0);
    let n = env("PAGESTREAM_SIM_SEEDS", 1000);
    let t = Instant::now();
    let mut total = sim::SimReport::default();
    for seed in first..first + n {
        let r = match catch_unwind(AssertUnwindSafe(|| sim::run(seed))) {
            Ok(Ok(r)) => r,
            Ok(Err(f)) => panic!("{f}"),
            Err(p) => {
                eprintln!(
                    "simulation seed {seed} panicked\nreplay: {}",
                    sim::replay_command(seed)
                );
                resume_unwind(p)
            }
        };
        total.pages += r.pages;
        total.past_end += r.past_end;
        total.failed += r.failed;
        total.exhausted += r.exhausted;
        total.reads += r.reads;
        total.faults += r.faults;
        total.chaos += r.chaos;
        total.abandoned += r.abandoned;
        total.waker_swaps += r.waker_swaps;
        total.inline += r.inline;
    }
    println!(
        "simulation: seeds {first}..{} in {:.1} s: {} pages; errors explained: {} past the end, \
         {} of failed or cancelled reads, {} pool exhausted; {} reads, {} faults, \
         {} resets/drops/closes, {} unwanted reads dropped, {} waker swaps, {} reads ended inline",
        first + n,
        t.elapsed().as_secs_f64(),
        total.pages,
        total.past_end,
        total.failed,
        total.exhausted,
        total.reads,
        total.faults,
        total.chaos,
        total.abandoned,
        total.waker_swaps,
        total.inline
    );
    // Over the default seeds, every kind of event happened: a simulation
    // whose faults or chaos stopped firing would pass for nothing.
    if n >= 1000 {
        for (what, count) in [
            ("pages", total.pages),
            ("past-end errors", total.past_end),
            ("failed or cancelled reads", total.failed),
            ("exhausted pools", total.exhausted),
            ("faults", total.faults),
            ("resets, drops and closes", total.chaos),
            ("dropped unwanted reads", total.abandoned),
            ("waker swaps", total.waker_swaps),
            ("reads ended inside start_read", total.inline),
        ] {
            assert!(count > 0, "no {what} in {n} seeds");
        }
    }
}
