//! The scan programs' command lines: clap structs read with [`parse`], the
//! value syntax they share (sizes such as `8KiB` or `1GiB`, `on`/`off`,
//! numbers, runtime lists), and the checks across flags. Errors are
//! [`UsageError`]s; [`UsageError::exit`] prints one on a single line and
//! exits with code 2.

mod values;

pub use values::*;

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

#[cfg(test)]
mod tests {
    use super::*;

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
