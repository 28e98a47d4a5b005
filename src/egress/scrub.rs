//! Taking a secret's value out of what its host answers, in every form a value commonly
//! comes back in: as is, base64 (standard and URL-safe, each of the three alignments a value
//! can have inside a longer base64 text), hex (either case) and percent-encoded; and any
//! fragment of 8 bytes or more of its start that a response cuts short (a truncated echo),
//! wherever the fragment ends: at a mismatch, a frame's end or the body's.
//!
//! What stays possible (docs/network.md): a listed host that returns the value transformed
//! otherwise (encrypted, hashed, reversed, split across fields, an encoding not above).

use base64::Engine as _;

/// The shortest start of a value that is taken out when a response cuts it short.
pub const MIN_FRAGMENT: usize = 8;

/// One form of a value and what replaces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    pub form: Vec<u8>,
    pub placeholder: Vec<u8>,
    /// Whether a start of this form of `MIN_FRAGMENT` bytes or more counts (the value's own
    /// form: the others' fragments are too short to tell from noise).
    pub fragments: bool,
}

/// Every form of `value` to take out, each replaced by `placeholder`.
pub fn patterns(value: &str, placeholder: &str) -> Vec<Pattern> {
    let bytes = value.as_bytes();
    let mut forms: Vec<Vec<u8>> = Vec::new();
    let mut push = |form: Vec<u8>| {
        // A form shorter than this matches noise; the value itself is always kept.
        if form.len() >= MIN_FRAGMENT && !forms.contains(&form) {
            forms.push(form);
        }
    };
    for engine in [
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ] {
        // Inside a longer base64 text the value starts at one of three offsets of a 3-byte
        // group; the characters of its whole groups are the same whatever surrounds it.
        for skip in 0..3.min(bytes.len()) {
            let rest = &bytes[skip..];
            let whole = rest.len() / 3 * 3;
            push(engine.encode(&rest[..whole]).into_bytes());
        }
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    push(hex.to_uppercase().into_bytes());
    push(hex.into_bytes());
    let percent: String = bytes
        .iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    push(percent.into_bytes());
    let mut out = vec![Pattern {
        form: bytes.to_vec(),
        placeholder: placeholder.as_bytes().to_vec(),
        fragments: true,
    }];
    out.extend(
        forms
            .into_iter()
            .filter(|form| form.as_slice() != bytes)
            .map(|form| Pattern {
                form,
                placeholder: placeholder.as_bytes().to_vec(),
                fragments: false,
            }),
    );
    out
}

/// Replaces each form in `input` by its placeholder; returns the output and how many input
/// bytes it consumed (the rest may begin a form and waits for more). With `end`, nothing
/// waits: a start of a value's own form of [`MIN_FRAGMENT`] bytes or more left at the end is
/// taken out too.
pub fn scrub(input: &[u8], patterns: &[Pattern], end: bool) -> (Vec<u8>, usize) {
    let mut out = Vec::with_capacity(input.len());
    let mut copied = 0;
    let mut at = 0;
    'bytes: while at < input.len() {
        let byte = input[at];
        for pattern in patterns {
            let form = &pattern.form;
            if form.first() != Some(&byte) {
                continue;
            }
            let rest = &input[at..];
            let common = rest.iter().zip(form).take_while(|(a, b)| a == b).count();
            let whole = common == form.len();
            // The input ends inside the form: wait for more, unless it is the body's end.
            let waiting = common == rest.len() && !whole;
            if waiting && !end {
                out.extend_from_slice(&input[copied..at]);
                return (out, at);
            }
            let fragment = pattern.fragments && common >= MIN_FRAGMENT;
            if whole || fragment {
                out.extend_from_slice(&input[copied..at]);
                out.extend_from_slice(&pattern.placeholder);
                at += common;
                copied = at;
                continue 'bytes;
            }
        }
        at += 1;
    }
    out.extend_from_slice(&input[copied..]);
    (out, input.len())
}

/// `bytes` with every form taken out (a header value: whole, nothing waits).
pub fn scrub_all(bytes: &[u8], patterns: &[Pattern]) -> Vec<u8> {
    scrub(bytes, patterns, true).0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pats() -> Vec<Pattern> {
        patterns("s3cr3t-value-0123", "PH")
    }

    #[test]
    fn values_are_scrubbed_across_frames() {
        let pairs = pats();
        assert_eq!(
            scrub(b"a s3cr3t-value-0123 b", &pairs, false),
            (b"a PH b".to_vec(), 21)
        );
        let (out, used) = scrub(b"xx s3c", &pairs, false);
        assert_eq!((out.as_slice(), used), (&b"xx "[..], 3));
        assert_eq!(scrub(b"sss", &pairs, false).0, b"ss".to_vec());
    }

    #[test]
    fn encoded_echoes_and_cut_short_ones_are_taken_out() {
        let pairs = pats();
        let value = b"s3cr3t-value-0123";
        let std = base64::engine::general_purpose::STANDARD;
        // Inside longer base64 texts, at each alignment.
        for prefix in ["", "x", "xy", "xyz"] {
            let text = std.encode([prefix.as_bytes(), b"token=", value, b";"].concat());
            let out = scrub_all(text.as_bytes(), &pairs);
            let decoded = std.decode(&text).unwrap();
            assert!(String::from_utf8_lossy(&decoded).contains("s3cr3t"));
            assert!(
                out.windows(2).any(|w| w == b"PH"),
                "{prefix:?}: {}",
                String::from_utf8_lossy(&out)
            );
        }
        let hex: String = value.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(scrub_all(hex.as_bytes(), &pairs), b"PH");
        assert_eq!(scrub_all(hex.to_uppercase().as_bytes(), &pairs), b"PH");
        assert_eq!(scrub_all(b"q=s3cr3t-value-0123&", &pairs), b"q=PH&");
        // A truncated echo: all but the last byte, at the end and before other bytes.
        assert_eq!(scrub_all(b"got s3cr3t-value-012", &pairs), b"got PH");
        assert_eq!(scrub_all(b"got s3cr3t-value-01!", &pairs), b"got PH!");
        // A short start is noise, not the value.
        assert_eq!(scrub_all(b"s3cr3t", &pairs), b"s3cr3t");
    }
}
