//! JSON with comments, as the Dev Container spec allows it: `//` and `/* */` comments and
//! trailing commas are blanked out (replaced by spaces, newlines kept) so that serde_json
//! reads the rest and its errors' line and column still point into the user's file.

/// `text` with comments and trailing commas blanked; strings are copied untouched.
pub fn strip(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let mut i = 0;
    // Where the last comma outside a string was, while only blanks followed it.
    let mut pending_comma: Option<usize> = None;
    // Whether the last byte outside comments and blanks ended a value.
    let mut after_value = false;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                pending_comma = None;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    // An escape takes the next byte with it (`\"` does not end the string).
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                after_value = true;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    out[i] = b' ';
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                let mut j = i + 2;
                while j < bytes.len() && !(bytes[j] == b'*' && bytes.get(j + 1) == Some(&b'/')) {
                    j += 1;
                }
                // An unclosed comment runs to the end, as the spec's parser reads it.
                let end = (j + 2).min(bytes.len());
                for byte in &mut out[i..end] {
                    if *byte != b'\n' {
                        *byte = b' ';
                    }
                }
                i = end;
            }
            // Only a comma after a value can be trailing (`"a": ,` stays, for its error).
            b',' => {
                pending_comma = after_value.then_some(i);
                after_value = false;
                i += 1;
            }
            b']' | b'}' => {
                if let Some(comma) = pending_comma.take() {
                    out[comma] = b' ';
                }
                i += 1;
                after_value = true;
            }
            byte if byte.is_ascii_whitespace() => i += 1,
            byte => {
                pending_comma = None;
                after_value = !matches!(byte, b':' | b'[' | b'{');
                i += 1;
            }
        }
    }
    // Only ASCII bytes were replaced, by ASCII spaces: the text is still UTF-8.
    String::from_utf8(out).expect("only ASCII bytes outside strings were blanked")
}

#[cfg(test)]
mod tests {
    use super::strip;

    fn value(text: &str) -> serde_json::Value {
        serde_json::from_str(&strip(text)).expect("stripped text parses")
    }

    #[test]
    fn comments_and_trailing_commas_go() {
        let text =
            "{\n // a comment\n \"a\": [1, 2,], /* block\n comment */ \"b\": {\"c\": 1,},\n}";
        assert_eq!(value(text), serde_json::json!({"a": [1, 2], "b": {"c": 1}}));
        assert_eq!(strip(text).lines().count(), text.lines().count());
    }

    #[test]
    fn strings_are_untouched() {
        let text = r#"{"url": "http://x//y", "s": "a \" /* b */ ,]", "t": "\\"}"#;
        assert_eq!(
            value(text),
            serde_json::json!({"url": "http://x//y", "s": "a \" /* b */ ,]", "t": "\\"})
        );
    }

    #[test]
    fn errors_keep_their_line() {
        let text = "{\n  // one\n  \"a\": 1,\n  \"b\": ,\n}";
        let error = serde_json::from_str::<serde_json::Value>(&strip(text)).unwrap_err();
        assert_eq!(error.line(), 4);
    }
}
