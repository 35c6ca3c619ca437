//! The value syntax the scan programs share, and the checks of single
//! flags: sizes (`8KiB`, `1GiB`), durations (`30s`, `10m`), `on`/`off`,
//! numbers, `--ring`, `--yield-budget`, and the [`UsageError`] they report.
//! Depends on nothing but std and `pagestream`, so the fuzz target
//! `values` (`fuzz/fuzz_targets/values.rs`) can include it by path.

use std::fmt;
use std::str::FromStr;

/// A bad command line: what was wrong (one line, pointing at `--help`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

impl UsageError {
    /// Prints `program: error: …; see 'program --help'` (one line) to
    /// stderr and exits with 2. The usage text is not repeated: it would
    /// bury the one line that says what is wrong.
    pub fn exit(&self, program: &str) -> ! {
        eprintln!("{}", self.line(program));
        std::process::exit(2)
    }

    /// The line [`exit`](Self::exit) prints.
    pub fn line(&self, program: &str) -> String {
        format!("{program}: error: {self}; see '{program} --help'")
    }
}

/// A number, for clap (`value_parser = number::<usize>`): the error says
/// which text is not one.
pub fn number<T: FromStr>(s: &str) -> Result<T, String> {
    s.parse::<T>()
        .map_err(|_| format!("{s:?} is not a valid number"))
}

/// Parses a block size: a [`parse_size`] that fits in `usize` (whether it
/// is a power of two in range is [`check_block_size`]'s business).
pub fn parse_block_size(s: &str) -> Result<usize, String> {
    let v = parse_size(s)?;
    usize::try_from(v).map_err(|_| format!("{s:?} is too large"))
}

/// Parses `--ring`: `auto` (`None`), `off` (`Some(0)`) or a positive size.
pub fn parse_ring(s: &str) -> Result<Option<usize>, String> {
    match s {
        "auto" => Ok(None),
        "off" => Ok(Some(0)),
        _ => {
            let v = parse_size(s)?;
            match usize::try_from(v) {
                Ok(0) | Err(_) => Err(format!("{s:?}: expected a size, auto or off")),
                Ok(v) => Ok(Some(v)),
            }
        }
    }
}

/// Parses `--yield-budget`: `auto`, `off` (never yield for the budget), a
/// time (`200us`, `1ms`) or a count of items (`64`).
pub fn parse_yield_budget(s: &str) -> Result<pagestream::YieldBudget, String> {
    use pagestream::YieldBudget;
    use std::time::Duration;
    let bad = || format!("{s:?}: expected auto, off, a time (200us, 1ms) or a count of items");
    let time = |digits: &str, unit: u64| -> Result<YieldBudget, String> {
        let v: u64 = digits.parse().map_err(|_| bad())?;
        match v.checked_mul(unit) {
            Some(0) | None => Err(bad()),
            Some(us) => Ok(YieldBudget::Time(Duration::from_micros(us))),
        }
    };
    match s {
        "auto" => Ok(YieldBudget::Auto),
        "off" => Ok(YieldBudget::Unlimited),
        _ => {
            if let Some(d) = s.strip_suffix("us") {
                time(d, 1)
            } else if let Some(d) = s.strip_suffix("ms") {
                time(d, 1000)
            } else {
                match s.parse::<usize>() {
                    Ok(0) | Err(_) => Err(bad()),
                    Ok(n) => Ok(YieldBudget::Items(n)),
                }
            }
        }
    }
}

/// A yield budget as `--yield-budget` takes it: `auto`, `off`, a time in
/// µs (`200us`) or a count of items (`64`).
pub fn format_budget(b: pagestream::YieldBudget) -> String {
    use pagestream::YieldBudget;
    match b {
        YieldBudget::Items(n) => n.to_string(),
        YieldBudget::Time(d) => format!("{}us", d.as_micros()),
        YieldBudget::Unlimited => "off".into(),
        YieldBudget::Auto => "auto".into(),
        other => format!("{other:?}"),
    }
}

/// Parses `on` or `off`.
pub fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{s:?}: expected on or off")),
    }
}

/// Checks that the count `--flag` is at least 1.
pub fn at_least_one(flag: &str, v: usize) -> Result<(), UsageError> {
    if v == 0 {
        return Err(UsageError(format!("--{flag} must be at least 1")));
    }
    Ok(())
}

/// Checks `--combine`: an `io_combine_limit` from 1 to
/// [`pagestream::MAX_IO_COMBINE_LIMIT`].
pub fn check_combine(n: usize) -> Result<(), UsageError> {
    if n == 0 || n > pagestream::MAX_IO_COMBINE_LIMIT {
        return Err(UsageError(format!(
            "--combine must be 1 to {}",
            pagestream::MAX_IO_COMBINE_LIMIT
        )));
    }
    Ok(())
}

/// Checks `--max-ios`: at most [`pagestream::MAX_IOS`] (0 is one read at a
/// time and no advice).
pub fn check_max_ios(n: usize) -> Result<(), UsageError> {
    if n > pagestream::MAX_IOS {
        return Err(UsageError(format!(
            "--max-ios {n} is larger than the maximum {}",
            pagestream::MAX_IOS
        )));
    }
    Ok(())
}

/// Checks `--block-size` (a power of two from 512 bytes to 1MiB) and
/// `--size` (a positive multiple of the block size).
pub fn check_block_size(block_size: usize, size: u64) -> Result<(), UsageError> {
    if block_size < 512 || !block_size.is_power_of_two() || block_size > 1 << 20 {
        return Err(UsageError(format!(
            "--block-size {block_size} must be a power of two from 512 bytes to 1MiB"
        )));
    }
    if size == 0 || size % block_size as u64 != 0 {
        return Err(UsageError(format!(
            "--size {size} must be a positive multiple of the block size {block_size}"
        )));
    }
    Ok(())
}

/// Parses a size: a number with an optional unit `B`, `K`/`KiB`, `M`/`MiB`,
/// `G`/`GiB`, `T`/`TiB`, `P`/`PiB` (powers of 1024; also `KB`, `MB`, … as powers of
/// 1024, case-insensitive), e.g. `256MiB`, `1GiB`, `4096`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '_'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: u64 = num
        .replace('_', "")
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 256MiB, 1GiB)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        "p" | "pb" | "pib" => 1 << 50,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use KiB, MiB, GiB)")),
    };
    num.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// The binary units sizes are written in, largest first, with their
/// power of two.
pub const UNITS: [(&str, u32); 5] = [
    ("PiB", 50),
    ("TiB", 40),
    ("GiB", 30),
    ("MiB", 20),
    ("KiB", 10),
];

/// Formats bytes as `1PiB`, `1GiB`, `256MiB`, `12KiB` or `123B` (exact units only).
pub fn format_size(bytes: u64) -> String {
    for (unit, shift) in UNITS {
        if bytes >= 1 << shift && bytes % (1 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes}B")
}

/// Parses a duration: a whole number with a unit `ms`, `s`, `m` or `h`
/// (`500ms`, `30s`, `10m`), positive.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    use std::time::Duration;
    let bad = || format!("{s:?}: expected a duration such as 500ms, 30s, 10m or 1h");
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| bad())?;
    let ms: u64 = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        _ => return Err(bad()),
    };
    match n.checked_mul(ms) {
        Some(0) | None => Err(bad()),
        Some(ms) => Ok(Duration::from_millis(ms)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yield_budgets() {
        use pagestream::YieldBudget;
        use std::time::Duration;
        assert_eq!(parse_yield_budget("auto"), Ok(YieldBudget::Auto));
        assert_eq!(parse_yield_budget("off"), Ok(YieldBudget::Unlimited));
        let t = |us| Ok(YieldBudget::Time(Duration::from_micros(us)));
        assert_eq!(parse_yield_budget("200us"), t(200));
        assert_eq!(parse_yield_budget("2ms"), t(2000));
        assert_eq!(parse_yield_budget("64"), Ok(YieldBudget::Items(64)));
        for bad in ["0", "0us", "0ms", "ms", "-1", "1s", "fast"] {
            let e = parse_yield_budget(bad).expect_err(bad);
            assert!(e.contains(bad), "{e}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("256m"), Ok(256 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("8KiB"), Ok(8192));
        assert_eq!(parse_size("1PiB"), Ok(1 << 50));
        assert!(parse_size("").is_err());
        assert!(parse_size("GiB").is_err());
        assert!(parse_size("12XB").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999TiB").is_err());
        assert_eq!(format_size(1 << 30), "1GiB");
        assert_eq!(format_size(3 << 20), "3MiB");
        assert_eq!(format_size(1000), "1000B");
    }

    #[test]
    fn durations() {
        use std::time::Duration;
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in [
            "",
            "0s",
            "10",
            "s",
            "-1s",
            "1.5s",
            "3d",
            "99999999999999999999h",
        ] {
            let e = parse_duration(bad).expect_err(bad);
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }
}
