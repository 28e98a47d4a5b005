//! Agent-controlled text made safe for a person's terminal: the one place that decides how
//! a commit subject, an author, a file name, an event's detail or an error quoting any of
//! them is printed in human output (the CLI's tables and lines, on a terminal or not).
//!
//! Invariant: what these functions return holds no byte a terminal acts on: no C0 control
//! (ESC, CR, BEL, backspace...) except the newline and tab that [`block`] keeps, no DEL, no
//! C1 control (U+0080..U+009F, which some terminals read as CSI/OSC), and no Unicode format
//! character that reorders or hides text (bidi embeddings, overrides and isolates, the
//! marks, line and paragraph separators). Each is shown as a visible escape instead, so the
//! reader sees that the agent wrote one. Single-line fields ([`line`], [`path`]) escape the
//! newline and tab too, so a name cannot forge another line of a list. `--json` never goes
//! through here: it stays lossless, and JSON escapes control characters itself.

use std::borrow::Cow;

/// Whether a terminal (or a reader) could be misled by `c` printed raw.
pub fn is_unsafe(c: char) -> bool {
    c.is_control() // C0, DEL and C1
        || matches!(
            c,
            '\u{061C}' // arabic letter mark
                | '\u{200E}'..='\u{200F}' // left-to-right / right-to-left marks
                | '\u{2028}'..='\u{2029}' // line and paragraph separators
                | '\u{202A}'..='\u{202E}' // embeddings and overrides
                | '\u{2066}'..='\u{2069}' // isolates
                | '\u{FEFF}' // zero-width no-break space (a BOM mid-text)
        )
}

/// The visible form of an unsafe character outside quotes: `\n`, `\t`, `\r`, `\e` for the
/// common ones, `\xNN` for other C0/DEL/C1, `\u{NNNN}` for format characters.
fn escape_into(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        '\r' => out.push_str("\\r"),
        '\u{1b}' => out.push_str("\\e"),
        c if u32::from(c) < 0x100 => out.push_str(&format!("\\x{:02x}", u32::from(c))),
        c => out.push_str(&format!("\\u{{{:04x}}}", u32::from(c))),
    }
}

fn escaped(text: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(|c| is_unsafe(c) && !keep(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unsafe(c) && !keep(c) {
            escape_into(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A single-line field (a subject, an author, a label, a host name, a command): every
/// unsafe character escaped, newline and tab included.
pub fn line(text: &str) -> Cow<'_, str> {
    escaped(text, |_| false)
}

/// [`line`], cut to `max` characters (then ending in `…`): a field another party wrote
/// (a commit subject, a repository's value) shown inside a sentence, one line and not a page.
pub fn short_line(text: &str, max: usize) -> String {
    let line = line(text);
    if line.chars().count() <= max {
        return line.into_owned();
    }
    line.chars().take(max).collect::<String>() + "…"
}

/// Multi-line text (an error message, a commit body, a replayed log): newline and tab kept,
/// every other unsafe character escaped.
pub fn block(text: &str) -> Cow<'_, str> {
    escaped(text, |c| c == '\n' || c == '\t')
}

/// A file path as git prints it with `core.quotePath` (for the characters that matter):
/// unchanged when it holds nothing unsafe, `"` or `\`; else in double quotes with C escapes
/// (`\t`, `\n`, `\r`, `\"`, `\\`) and octal for the rest (`\033`), each byte of a format
/// character in octal as git does. Printable non-ASCII stays as it is.
pub fn path(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| is_unsafe(c) || c == '"' || c == '\\') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if is_unsafe(c) => {
                let mut bytes = [0; 4];
                for byte in c.encode_utf8(&mut bytes).bytes() {
                    out.push_str(&format!("\\{byte:03o}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    Cow::Owned(out)
}

/// How many bytes at the end of `bytes` begin a UTF-8 character that is not complete yet
/// (0 to 3): a reader of chunks holds those back for the next one.
pub fn incomplete_tail(bytes: &[u8]) -> usize {
    let len = bytes.len();
    for back in 1..=3.min(len) {
        let wants = match bytes[len - back] {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            0x80..=0xBF => continue,
            _ => return 0,
        };
        return if wants > back { back } else { 0 };
    }
    0
}

/// A replay (`logs`, `execs JOB EXEC`) made terminal-safe chunk by chunk: lossy UTF-8, then
/// [`block`], with a character split across two chunks kept until its end arrives.
#[derive(Default)]
pub struct Replay {
    pending: Vec<u8>,
}

impl Replay {
    /// The safe text of `bytes` (and of what the last call held back).
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        // Hold back at most 3 bytes of a character that may still be completed.
        let cut = self.pending.len() - incomplete_tail(&self.pending);
        let rest = self.pending.split_off(cut);
        let text = block(&String::from_utf8_lossy(&self.pending)).into_owned();
        self.pending = rest;
        text
    }

    /// What is left at the end (an incomplete character, shown as a replacement).
    pub fn finish(&mut self) -> String {
        let rest = std::mem::take(&mut self.pending);
        block(&String::from_utf8_lossy(&rest)).into_owned()
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_short_line_is_escaped_and_cut() {
        assert_eq!(super::short_line("a\nb", 10), "a\\nb");
        let long = "x".repeat(300);
        let cut = super::short_line(&long, 120);
        assert_eq!(cut.chars().count(), 121);
        assert!(cut.ends_with('…'));
        assert_eq!(super::short_line("short", 120), "short");
    }

    use super::*;

    const ATTACKS: &[&str] = &[
        "evil\u{1b}]52;c;Y3VybCBldmlsLnNoIHwgc2g=\u{7}\u{1b}[2Jname.txt",
        "see \u{1b}]8;;https://evil.example/\u{1b}\\here\u{1b}]8;;\u{1b}\\ \u{1b}[2J\u{1b}[H",
        "author \u{1b}]0;title\u{7}",
        "u\u{1b}[1A\u{1b}[2K\n  committed    modified   README-looks-legit",
        "x\nmerge     into main: merges cleanly",
        "over\rwrite",
        "c1 \u{9b}2J and \u{9d}0;t\u{9c}",
        "bidi \u{202e}txt.exe\u{202c} \u{2066}x\u{2069}",
        "del\u{7f}",
    ];

    fn has_unsafe(text: &str, allowed: &[char]) -> bool {
        text.chars().any(|c| is_unsafe(c) && !allowed.contains(&c))
    }

    #[test]
    fn no_attack_survives_any_form() {
        for attack in ATTACKS {
            for out in [line(attack), path(attack)] {
                assert!(!has_unsafe(&out, &[]), "{out:?}");
                assert!(!out.contains('\n') && !out.contains('\r'), "{out:?}");
            }
            assert!(!has_unsafe(&block(attack), &['\n', '\t']));
        }
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        for plain in ["README.md", "src/é/naïve.rs", "fix: a \"quoted\" thing"] {
            assert!(matches!(line(plain), Cow::Borrowed(_)));
        }
        assert!(matches!(path("src/é/naïve.rs"), Cow::Borrowed(_)));
        assert!(matches!(block("two\nlines\tand a tab"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_replay_in_chunks_is_safe_and_keeps_split_characters() {
        let text = "é\u{1b}[2J\u{9b}ok\r\n".as_bytes();
        let mut replay = Replay::default();
        let mut out = String::new();
        for byte in text {
            out.push_str(&replay.push(std::slice::from_ref(byte)));
        }
        out.push_str(&replay.finish());
        assert_eq!(out, "é\\e[2J\\x9bok\\r\n");
    }

    #[test]
    fn escapes_are_visible_and_paths_quote_as_git_does() {
        assert_eq!(line("a\u{1b}[2Jb\rc\nd"), "a\\e[2Jb\\rc\\nd");
        assert_eq!(line("c1\u{9b}"), "c1\\x9b");
        assert_eq!(line("r\u{202e}l"), "r\\u{202e}l");
        assert_eq!(path("a\"b"), "\"a\\\"b\"");
        assert_eq!(path("evil\u{1b}x\ty"), "\"evil\\033x\\ty\"");
        assert_eq!(path("r\u{202e}l"), "\"r\\342\\200\\256l\"");
        assert_eq!(block("one\ntwo\u{1b}[1A"), "one\ntwo\\e[1A");
    }
}
