//! Run records, their JSON form, and summaries over repeated runs.

use serde_json::{Map, Value};

/// One JSON record, fields in insertion order: a [`serde_json`] map with a
/// builder's `set`. Non-finite numbers become `null`; a whole number given
/// as a float is written without a fraction (`0`, not `0.0`), as these
/// programs have always written it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JsonObject(pub Map<String, Value>);

impl JsonObject {
    /// Adds a field, or replaces its value in place.
    pub fn set(&mut self, key: &str, value: impl Into<Value>) -> &mut Self {
        let mut value = value.into();
        if let Some(x) = value.as_f64().filter(|_| value.is_f64()) {
            if x.fract() == 0.0 && x.abs() < (1u64 << 53) as f64 {
                value = Value::from(x as i64);
            }
        }
        self.0.insert(key.to_string(), value);
        self
    }

    /// The field `key`, if set.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    /// One line of JSON.
    pub fn to_line(&self) -> String {
        serde_json::to_string(&self.0).expect("a map of JSON values serializes")
    }

    /// The record as a JSON value.
    pub fn into_value(self) -> Value {
        Value::Object(self.0)
    }
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
            .set("zero", 0.0)
            .set("ok", true)
            .set("q", "a\"b\\\n")
            .set("inf", f64::INFINITY);
        o.set("pages", 4u64);
        assert_eq!(
            o.to_line(),
            r#"{"runtime":"threadpool","pages":4,"x":1.5,"zero":0,"ok":true,"q":"a\"b\\\n","inf":null}"#
        );
        assert_eq!(o.get("pages"), Some(&Value::from(4u64)));
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
