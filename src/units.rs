//! Human units: durations (`90s`, `10m`, `1h30m`), byte sizes (`512m`, `2g`) and CPU counts,
//! parsed from flags and config files and printed back for people.
//!
//! Parsing is strict: a value that does not parse is an error naming what is allowed, never a
//! silent default, because a typo in a memory limit must not turn into "no limit".

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A value that could not be read as the unit it was given for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} `{input}`: expected {expected}")]
pub struct UnitError {
    pub what: &'static str,
    pub input: String,
    pub expected: &'static str,
}

/// Reads `off` or a duration.
pub fn parse_optional_duration(text: &str) -> Result<Option<HumanDuration>, UnitError> {
    if text == "off" {
        Ok(None)
    } else {
        text.parse().map(Some)
    }
}

/// A length of time written the way people write it: `500ms`, `30s`, `10m`, `1h30m`, `2d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HumanDuration(pub Duration);

impl FromStr for HumanDuration {
    type Err = UnitError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = || UnitError {
            what: "duration",
            input: input.to_string(),
            expected: "a duration like 500ms, 30s, 10m, 1h30m or 2d",
        };
        let s = input.trim();
        if s.is_empty() {
            return Err(err());
        }
        // A bare number is seconds, as in `timeout 45`.
        if s.chars().all(|c| c.is_ascii_digit()) {
            let secs: u64 = s.parse().map_err(|_| err())?;
            return Ok(HumanDuration(Duration::from_secs(secs)));
        }
        // Anything else as humantime reads it (`1h30m`, `1h 30m`, `2days`, `500ms`), with
        // paddock's own message when it does not.
        humantime::parse_duration(s)
            .map(HumanDuration)
            .map_err(|_| err())
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if ms == 0 {
            return f.write_str("0s");
        }
        if !ms.is_multiple_of(1000) {
            return write!(f, "{ms}ms");
        }
        let mut secs = ms / 1000;
        let mut out = String::new();
        for (unit, len) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
            if secs >= len {
                out.push_str(&format!("{}{unit}", secs / len));
                secs %= len;
            }
        }
        f.write_str(&out)
    }
}

/// Whole milliseconds of `duration`, for records and logs (saturating: no run lasts 584
/// million years).
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A short age for tables: `42s`, `5m`, `3h`, `2d`.
pub fn format_age(age: chrono::TimeDelta) -> String {
    let secs = age.num_seconds().max(0);
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3_600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3_600),
        s => format!("{}d", s / 86_400),
    }
}

/// A byte count written `512m`, `2g`, `1024k`, `4096` (bytes); binary multiples, as Docker reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = UnitError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = || UnitError {
            what: "size",
            input: input.to_string(),
            expected: "a size like 512m, 2g or 1024k (b, k, m, g, t)",
        };
        let s = input.trim().to_ascii_lowercase();
        let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        if digits == 0 {
            return Err(err());
        }
        let number: u64 = s[..digits].parse().map_err(|_| err())?;
        let multiplier: u64 = match s[digits..].trim_end_matches("ib").trim_end_matches('b') {
            "" => 1,
            "k" => 1 << 10,
            "m" => 1 << 20,
            "g" => 1 << 30,
            "t" => 1 << 40,
            _ => return Err(err()),
        };
        number.checked_mul(multiplier).map(ByteSize).ok_or_else(err)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let units = [
            ("t", 1u64 << 40),
            ("g", 1 << 30),
            ("m", 1 << 20),
            ("k", 1 << 10),
        ];
        for (unit, size) in units {
            if self.0 >= size && self.0.is_multiple_of(size) {
                return write!(f, "{}{unit}", self.0 / size);
            }
        }
        write!(f, "{}b", self.0)
    }
}

/// A size for people: `1.2 MiB`, `340 KiB`.
pub fn format_size(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < units.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", units[unit])
    }
}

/// A CPU share: `1.5` CPUs. Must be positive and at most 1024.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Cpus(pub f64);

impl Cpus {
    /// The value in Docker's `nano_cpus` unit.
    #[expect(
        clippy::cast_possible_truncation,
        reason = "parsing keeps CPU counts positive and small; f64 to i64 saturates"
    )]
    pub fn nano_cpus(self) -> i64 {
        (self.0 * 1e9).round() as i64
    }
}

impl FromStr for Cpus {
    type Err = UnitError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let value: f64 = input.trim().parse().map_err(|_| UnitError {
            what: "cpus",
            input: input.to_string(),
            expected: "a positive number of CPUs like 0.5 or 2",
        })?;
        if !(value > 0.0 && value <= 1024.0) {
            return Err(UnitError {
                what: "cpus",
                input: input.to_string(),
                expected: "a positive number of CPUs like 0.5 or 2",
            });
        }
        Ok(Cpus(value))
    }
}

impl fmt::Display for Cpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Serde support shared by the unit types: they are written as strings and read from strings
/// or plain YAML numbers (`cpus: 1.5`, `pids: 256`).
macro_rules! string_serde {
    ($ty:ty) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.to_string())
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let raw = StringOrNumber::deserialize(deserializer)?;
                raw.0.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

string_serde!(HumanDuration);
string_serde!(ByteSize);
string_serde!(Cpus);

/// A scalar read as its text, so `cpus: 2` and `cpus: "2"` mean the same.
struct StringOrNumber(String);

impl<'de> Deserialize<'de> for StringOrNumber {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = StringOrNumber;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a number")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(StringOrNumber(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(StringOrNumber(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(StringOrNumber(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(StringOrNumber(v.to_string()))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_print() {
        let d: HumanDuration = "1h30m".parse().unwrap();
        assert_eq!(d.0, Duration::from_secs(5400));
        assert_eq!(d.to_string(), "1h30m");
        assert_eq!("500ms".parse::<HumanDuration>().unwrap().0.as_millis(), 500);
        assert_eq!("45".parse::<HumanDuration>().unwrap().0.as_secs(), 45);
        assert_eq!("2d".parse::<HumanDuration>().unwrap().0.as_secs(), 172_800);
        assert_eq!("1h 30m".parse::<HumanDuration>().unwrap().0.as_secs(), 5400);
        assert_eq!(
            "2days".parse::<HumanDuration>().unwrap().0.as_secs(),
            172_800
        );
        let err = "10q".parse::<HumanDuration>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid duration `10q`: expected a duration like 500ms, 30s, 10m, 1h30m or 2d"
        );
        assert_eq!("1.5h".parse::<HumanDuration>().unwrap().0.as_secs(), 5400);
        for bad in ["", "m", "10q", "-3s", "1h30", "ten minutes"] {
            assert!(
                bad.parse::<HumanDuration>().is_err(),
                "{bad} should not parse"
            );
        }
    }

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!("512m".parse::<ByteSize>().unwrap().0, 512 << 20);
        assert_eq!("2G".parse::<ByteSize>().unwrap().0, 2 << 30);
        assert_eq!("2gb".parse::<ByteSize>().unwrap().0, 2 << 30);
        assert_eq!("4096".parse::<ByteSize>().unwrap().0, 4096);
        assert_eq!(ByteSize(512 << 20).to_string(), "512m");
        let err = "12q".parse::<ByteSize>().unwrap_err();
        assert!(err.to_string().contains("`12q`"), "{err}");
        assert_eq!(format_size(1536), "1.5 KiB");
    }

    #[test]
    fn cpus_must_be_positive() {
        assert_eq!("1.5".parse::<Cpus>().unwrap().nano_cpus(), 1_500_000_000);
        assert!("0".parse::<Cpus>().is_err());
        assert!("abc".parse::<Cpus>().is_err());
    }
}
