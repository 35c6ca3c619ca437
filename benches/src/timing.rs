//! Run records, their JSON form, and summaries over repeated runs.

use std::fmt::Write as _;

/// A JSON value (just what the reports need).
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// A string.
    Str(String),
    /// An unsigned integer.
    U64(u64),
    /// A number (non-finite values print as `null`).
    F64(f64),
    /// A boolean.
    Bool(bool),
}

impl From<&str> for Json {
    fn from(s: &str) -> Json {
        Json::Str(s.to_string())
    }
}
impl From<String> for Json {
    fn from(s: String) -> Json {
        Json::Str(s)
    }
}
impl From<u64> for Json {
    fn from(v: u64) -> Json {
        Json::U64(v)
    }
}
impl From<usize> for Json {
    fn from(v: usize) -> Json {
        Json::U64(v as u64)
    }
}
impl From<f64> for Json {
    fn from(v: f64) -> Json {
        Json::F64(v)
    }
}
impl From<bool> for Json {
    fn from(v: bool) -> Json {
        Json::Bool(v)
    }
}

/// A JSON object with fields in insertion order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JsonObject(pub Vec<(String, Json)>);

impl JsonObject {
    /// Adds (or replaces) a field.
    pub fn set(&mut self, key: &str, value: impl Into<Json>) -> &mut Self {
        let value = value.into();
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key.to_string(), value)),
        }
        self
    }

    /// The field `key`, if set.
    pub fn get(&self, key: &str) -> Option<&Json> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// One line of JSON.
    pub fn to_line(&self) -> String {
        let mut s = String::from("{");
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            escape(&mut s, k);
            s.push(':');
            match v {
                Json::Str(t) => escape(&mut s, t),
                Json::U64(n) => {
                    let _ = write!(s, "{n}");
                }
                Json::F64(x) if x.is_finite() => {
                    let _ = write!(s, "{x}");
                }
                Json::F64(_) => s.push_str("null"),
                Json::Bool(b) => s.push_str(if *b { "true" } else { "false" }),
            }
        }
        s.push('}');
        s
    }
}

fn escape(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Median, minimum and maximum of some measurements.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The median (mean of the middle two for an even count).
    pub median: f64,
    /// The smallest.
    pub min: f64,
    /// The largest.
    pub max: f64,
    /// How many.
    pub n: usize,
}

impl Spread {
    /// Over `values`; `None` if empty.
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
            n,
        })
    }
}

/// MiB per second.
pub fn mib_per_s(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / (1u64 << 20) as f64 / seconds
    } else {
        f64::INFINITY
    }
}

/// Prints a program's closing summary: on stdout after a table, or on stderr
/// under `--json`, so that stdout stays one JSON object per line.
pub fn print_summary(json: bool, text: &str) {
    if json {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_line() {
        let mut o = JsonObject::default();
        o.set("runtime", "threadpool")
            .set("pages", 3u64)
            .set("x", 1.5)
            .set("ok", true)
            .set("q", "a\"b\\\n")
            .set("inf", f64::INFINITY);
        o.set("pages", 4u64);
        assert_eq!(
            o.to_line(),
            r#"{"runtime":"threadpool","pages":4,"x":1.5,"ok":true,"q":"a\"b\\\n","inf":null}"#
        );
        assert_eq!(o.get("pages"), Some(&Json::U64(4)));
    }

    #[test]
    fn spread() {
        let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        assert_eq!(Spread::of(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert!(Spread::of(&[]).is_none());
        assert_eq!(mib_per_s(1 << 21, 2.0), 1.0);
    }
}
