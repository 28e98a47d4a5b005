//! Labels of a job: `KEY=VALUE` pairs an orchestrator keeps with it, repeatable flags on
//! the command line and a JSON object on the wire.

/// One `KEY=VALUE` label of a job. Keys are short words (letters, digits, `.`, `_`, `-`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    pub key: String,
    pub value: String,
}

impl std::str::FromStr for Label {
    type Err = String;

    fn from_str(text: &str) -> Result<Label, String> {
        let (key, value) = text
            .split_once('=')
            .ok_or_else(|| format!("invalid label `{text}`: expected KEY=VALUE"))?;
        Label::new(key, value)
    }
}

impl Label {
    pub fn new(key: &str, value: &str) -> Result<Label, String> {
        let key_ok = !key.is_empty()
            && key.len() <= 63
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !key_ok {
            return Err(format!(
                "invalid label key `{key}`: use up to 63 letters, digits, `.`, `_` or `-`"
            ));
        }
        if value.len() > 256 || value.chars().any(char::is_control) {
            return Err(format!(
                "invalid value of label `{key}`: at most 256 printable characters"
            ));
        }
        Ok(Label {
            key: key.to_string(),
            value: value.to_string(),
        })
    }
}

/// Labels are a JSON object (`{"ticket": "FR-7"}`) on the wire, repeatable flags on the
/// command line.
pub(super) mod label_map {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Label;

    pub fn serialize<S: Serializer>(labels: &[Label], serializer: S) -> Result<S::Ok, S::Error> {
        labels
            .iter()
            .map(|l| (l.key.as_str(), l.value.as_str()))
            .collect::<BTreeMap<_, _>>()
            .serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Label>, D::Error> {
        BTreeMap::<String, String>::deserialize(deserializer)?
            .iter()
            .map(|(key, value)| Label::new(key, value).map_err(serde::de::Error::custom))
            .collect()
    }
}
