//! The scan programs' command lines: clap structs read with [`parse`], the
//! value syntax they share (sizes such as `8KiB` or `1GiB`, `on`/`off`,
//! numbers, runtime lists), and the checks across flags. Errors are
//! [`UsageError`]s; [`UsageError::exit`] prints one on a single line and
//! exits with code 2.

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

/// Parses `items` (the command line without the program name) into `C`
/// with clap, as every scan program reads its command line: `usage` is the
/// help text (`-h`, `--help`; `Ok(None)`), a flag given twice keeps its
/// last value, a value may start with `-` (so `--pairs -1` is a bad count,
/// not an unknown option), and a clap error becomes one [`UsageError`]
/// line in the programs' words ("unknown option --x", "--x needs a value",
/// "--x: …" for a bad value).
pub fn parse<C: clap::Parser>(
    usage: &'static str,
    items: impl IntoIterator<Item = String>,
) -> Result<Option<C>, UsageError> {
    let cmd = C::command()
        .no_binary_name(true)
        .override_help(usage)
        .args_override_self(true)
        .mut_args(|a| {
            if a.get_action().takes_values() && !a.is_positional() {
                a.allow_hyphen_values(true)
            } else {
                a
            }
        });
    match cmd
        .try_get_matches_from(items)
        .and_then(|mut m| C::from_arg_matches_mut(&mut m))
    {
        Ok(c) => Ok(Some(c)),
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => Ok(None),
        Err(e) => Err(from_clap(&e)),
    }
}

/// A clap error as one line in the programs' words.
fn from_clap(e: &clap::Error) -> UsageError {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let context = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => s.clone(),
        Some(ContextValue::Strings(v)) => v.join(" "),
        _ => String::new(),
    };
    // "--size <SIZE>" names the flag "--size".
    let flag = context(ContextKind::InvalidArg)
        .split(['=', ' '])
        .next()
        .unwrap_or_default()
        .to_string();
    let msg = match e.kind() {
        ErrorKind::UnknownArgument if flag.starts_with("--") => format!("unknown option {flag}"),
        ErrorKind::UnknownArgument if flag.starts_with('-') && flag.len() > 1 => {
            format!("unknown option {flag:?} (options start with --)")
        }
        ErrorKind::UnknownArgument => format!("unexpected argument {flag:?}"),
        ErrorKind::InvalidValue if context(ContextKind::InvalidValue).is_empty() => {
            format!("{flag} needs a value")
        }
        ErrorKind::TooManyValues => format!(
            "{flag} takes no value (got {:?})",
            context(ContextKind::InvalidValue)
        ),
        ErrorKind::ValueValidation => match std::error::Error::source(e) {
            Some(why) => format!("{flag}: {why}"),
            None => format!(
                "{flag}: {:?} is not valid",
                context(ContextKind::InvalidValue)
            ),
        },
        _ => {
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or_default();
            first.strip_prefix("error: ").unwrap_or(first).to_string()
        }
    };
    UsageError(msg)
}

/// [`parse`], then `check` (the checks across flags) on the result.
pub fn parse_checked<C: clap::Parser, O>(
    usage: &'static str,
    items: impl IntoIterator<Item = String>,
    check: impl FnOnce(C) -> Result<O, UsageError>,
) -> Result<Option<O>, UsageError> {
    parse::<C>(usage, items)?.map(check).transpose()
}

/// The `main` of a scan program whose command line is the clap struct `C`:
/// [`parse_checked`], then `run`, with the exits of [`main`].
pub fn clap_main<C: clap::Parser, O>(
    program: &str,
    usage: &'static str,
    check: impl FnOnce(C) -> Result<O, UsageError>,
    run: impl FnOnce(O) -> std::io::Result<()>,
) {
    main(
        program,
        usage,
        |items| parse_checked(usage, items, check),
        run,
    );
}

/// A comma-separated list taken as one value: clap reads a field typed
/// `Vec` as a repeatable flag, this name keeps `--runtime a,b` one value.
pub type List<T> = Vec<T>;

/// `--runtime`: a runtime name, a comma-separated list of them, or `all`.
pub fn parse_runtimes(s: &str) -> Result<List<pagestream_runtimes::Runtime>, String> {
    pagestream_runtimes::parse_list(s).map_err(|e| e.to_string())
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

/// The `main` of a scan program: parses the command line (without the
/// program name) with `parse` (`Ok(None)` asks for the usage text, printed
/// to stdout; an error is printed as one line with [`UsageError::exit`] and
/// exits with 2), then runs `run`; an error from it is printed as
/// `program: error: …` and exits with 1.
pub fn main<O>(
    program: &str,
    usage: &str,
    parse: impl FnOnce(Vec<String>) -> Result<Option<O>, UsageError>,
    run: impl FnOnce(O) -> std::io::Result<()>,
) {
    let opts = match parse(std::env::args().skip(1).collect()) {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("{usage}");
            return;
        }
        Err(e) => e.exit(program),
    };
    if let Err(e) = run(opts) {
        eprintln!("{program}: error: {e}");
        std::process::exit(1);
    }
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

/// Formats bytes as `1PiB`, `1GiB`, `256MiB`, `12KiB` or `123B` (exact units only).
pub fn format_size(bytes: u64) -> String {
    for (unit, shift) in [
        ("PiB", 50),
        ("TiB", 40),
        ("GiB", 30),
        ("MiB", 20),
        ("KiB", 10),
    ] {
        if bytes >= 1 << shift && bytes % (1 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes}B")
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

    const USAGE: &str = "usage: prog [options]";

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[arg(long, default_value = "16", value_parser = number::<usize>)]
        max_ios: usize,
        #[arg(long, default_value = "8KiB", value_parser = parse_size)]
        size: u64,
        #[arg(long, value_parser = number::<i64>)]
        offset: Option<i64>,
        #[arg(long)]
        json: bool,
    }

    fn parse_line(v: &[&str]) -> Result<Option<Cli>, UsageError> {
        parse(USAGE, v.iter().map(|s| s.to_string()))
    }

    fn error(v: &[&str]) -> String {
        parse_line(v).expect_err("a usage error").0
    }

    #[test]
    fn flags_and_values() {
        let c = parse_line(&["--max-ios", "8", "--size=1GiB", "--json"])
            .unwrap()
            .unwrap();
        assert_eq!((c.max_ios, c.size, c.json), (8, 1 << 30, true));
        let c = parse_line(&[]).unwrap().unwrap();
        assert_eq!(
            (c.max_ios, c.size, c.offset, c.json),
            (16, 8192, None, false)
        );
        // The last of a repeated flag wins; a value may start with '-'.
        let c = parse_line(&["--max-ios", "1", "--max-ios", "2", "--offset", "-3"])
            .unwrap()
            .unwrap();
        assert_eq!((c.max_ios, c.offset), (2, Some(-3)));
    }

    #[test]
    fn errors_in_the_programs_words() {
        assert_eq!(error(&["--max-ios"]), "--max-ios needs a value");
        assert_eq!(
            error(&["--max-ios", "many"]),
            r#"--max-ios: "many" is not a valid number"#
        );
        assert_eq!(error(&["--json=1"]), r#"--json takes no value (got "1")"#);
        assert_eq!(error(&["--bogus"]), "unknown option --bogus");
        assert_eq!(
            error(&["-x"]),
            r#"unknown option "-x" (options start with --)"#
        );
        assert_eq!(error(&["stray"]), r#"unexpected argument "stray""#);
    }

    #[test]
    fn short_help_is_help() {
        assert!(parse_line(&["-h"]).unwrap().is_none());
        assert!(parse_line(&["--max-ios", "3", "--help"]).unwrap().is_none());
        let line = UsageError("unknown option --x".into()).line("prog");
        assert_eq!(line, "prog: error: unknown option --x; see 'prog --help'");
    }
}
