//! Key patterns of the books file: `ORDER#{id}` (a prefix, the captured id, a suffix),
//! `MAIL#*` (any value starting so), or a literal value.

/// One key attribute's pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPattern {
    /// `prefix{name}suffix`: the value captured between them (not empty).
    Capture {
        /// Text before the placeholder.
        prefix: String,
        /// Text after it.
        suffix: String,
    },
    /// `prefix*`: any value starting with the prefix.
    Prefix(String),
    /// The value itself.
    Literal(String),
}

impl KeyPattern {
    /// Parses `text`, whose one placeholder may be `{placeholder}` (e.g. `id`).
    ///
    /// # Errors
    /// What is wrong and what is allowed: another placeholder, two of them, or a `*` that is
    /// not the last character.
    pub fn parse(text: &str, placeholder: &str) -> Result<Self, String> {
        let names = super::fill::placeholders(text)?;
        let token = format!("{{{placeholder}}}");
        if let Some(other) = names.iter().find(|n| **n != placeholder) {
            return Err(format!("{text:?}: unknown placeholder {{{other}}}; a key pattern may hold {token} once, or end in *"));
        }
        match names.len() {
            0 => match text.find('*') {
                Some(at) if at + 1 == text.len() => Ok(Self::Prefix(text[..at].to_owned())),
                Some(_) => Err(format!("{text:?}: * may only end a pattern (any rest of the value)")),
                None => Ok(Self::Literal(text.to_owned())),
            },
            1 => {
                let (prefix, suffix) = text.split_once(&token).unwrap_or((text, ""));
                if prefix.contains('*') || suffix.contains('*') {
                    return Err(format!("{text:?}: a pattern holds {token} or ends in *, not both"));
                }
                Ok(Self::Capture { prefix: prefix.to_owned(), suffix: suffix.to_owned() })
            }
            _ => Err(format!("{text:?}: {token} may appear once")),
        }
    }

    /// Whether the pattern captures a value.
    pub fn captures(&self) -> bool {
        matches!(self, Self::Capture { .. })
    }

    /// `None` when `value` does not match; `Some(Some(captured))` or `Some(None)` (nothing to
    /// capture) when it does.
    pub fn matches<'a>(&self, value: &'a str) -> Option<Option<&'a str>> {
        match self {
            Self::Capture { prefix, suffix } => {
                let captured = value.strip_prefix(prefix.as_str())?.strip_suffix(suffix.as_str())?;
                (!captured.is_empty()).then_some(Some(captured))
            }
            Self::Prefix(prefix) => value.starts_with(prefix.as_str()).then_some(None),
            Self::Literal(literal) => (value == literal).then_some(None),
        }
    }

    /// The value with `captured` in place of the placeholder (a seed item's key for a group).
    pub fn with(&self, captured: &str) -> Option<String> {
        match self {
            Self::Capture { prefix, suffix } => Some(format!("{prefix}{captured}{suffix}")),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_capture_match_a_prefix_or_a_literal() {
        let order = KeyPattern::parse("ORDER#{id}", "id").unwrap();
        assert_eq!(order.matches("ORDER#o-1"), Some(Some("o-1")));
        assert_eq!(order.matches("ORDER#"), None, "an empty id is no id");
        assert_eq!(order.matches("IDEMPOTENCY#k"), None);
        assert_eq!(KeyPattern::parse("A#{id}#B", "id").unwrap().matches("A#x#B"), Some(Some("x")));
        assert_eq!(KeyPattern::parse("MAIL#*", "id").unwrap().matches("MAIL#0001"), Some(None));
        assert_eq!(KeyPattern::parse("PROFILE", "id").unwrap().matches("PROFILE"), Some(None));
        assert_eq!(order.with("o-2").as_deref(), Some("ORDER#o-2"));
        for (bad, says) in [("A#{group}", "unknown placeholder {group}"), ("A*B", "may only end"), ("{id}*", "not both"), ("{id}{id}", "once")] {
            let err = KeyPattern::parse(bad, "id").unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
}
