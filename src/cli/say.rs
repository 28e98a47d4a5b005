//! The only way the CLI prints: `say!` (stdout) and `tell!` (stderr) format a line and pass
//! it through [`crate::text::block`], so no byte a terminal acts on (ESC, CR, C1, bidi
//! controls) reaches a person's terminal from any human output, whatever agent text a
//! message quotes; `--json` goes through [`json`], which escapes those characters as JSON
//! `\u` escapes (lossless: a parser gets the exact strings back). Single-line fields in a
//! list (paths, subjects, table cells) are escaped with `text::line`/`text::path` by their
//! renderer first, so a newline in a name cannot forge a line. Exec output streamed live
//! (`exec`, `shell`, `run`) is the process's own bytes and is written raw by its sink.
//! An architecture test holds the CLI to this module.

use std::io::Write;

/// Writes one line to stdout, made terminal-safe. A closed pipe (`| head`) is ignored.
pub fn out(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{}", crate::text::block(line));
}

/// Writes one line to stderr, made terminal-safe.
pub fn err(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{}", crate::text::block(line));
}

/// JSON text with every character a terminal could act on written as a `\u` escape. JSON's
/// own escaping covers only C0; DEL, C1 and bidi controls can appear only inside strings, so
/// escaping them there keeps the document valid and every string exact.
pub fn json(text: &str) -> std::borrow::Cow<'_, str> {
    // C0 is JSON's own: escaped inside strings by serde, and outside them only the
    // document's whitespace.
    let needs = |c: char| crate::text::is_unsafe(c) && u32::from(c) >= 0x20;
    if !text.chars().any(needs) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if needs(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `println!`, made terminal-safe.
macro_rules! say {
    () => { $crate::cli::say::out("") };
    ($($arg:tt)*) => { $crate::cli::say::out(&format!($($arg)*)) };
}

/// `eprintln!`, made terminal-safe.
macro_rules! tell {
    ($($arg:tt)*) => { $crate::cli::say::err(&format!($($arg)*)) };
}

#[cfg(test)]
mod tests {
    #[test]
    fn json_escapes_keep_the_exact_strings() {
        let value = serde_json::json!({"subject": "a\u{9b}2J \u{202e}b\u{7f} \u{1b}[2J é"});
        let text = serde_json::to_string_pretty(&value).expect("serializes");
        let safe = super::json(&text);
        assert!(
            !safe.contains(['\u{1b}', '\u{9b}', '\u{202e}', '\u{7f}']),
            "{safe}"
        );
        let back: serde_json::Value = serde_json::from_str(&safe).expect("still JSON");
        assert_eq!(back, value);
    }
}
