//! What a delivery attempt's answer means.
//!
//! | answer | outcome | what the dispatcher does |
//! |---|---|---|
//! | 2xx | [`Outcome::Delivered`] | records the delivery (once per event and subscriber) |
//! | 410 Gone | [`Outcome::Gone`] | disables the subscriber, reports it, dead-letters the message |
//! | 408, 429, 5xx | [`Outcome::Retry`] | retries with backoff, honouring `Retry-After` |
//! | timeout, connection error | [`Outcome::Retry`] | retries with backoff |
//! | any other status (4xx, 3xx: redirects are not followed) | [`Outcome::Rejected`] | dead-letters at once with the status and the first 1 KiB of the body |

use std::time::Duration;

/// How much of a rejecting answer's body is kept for the dead-letter reason: 1 KiB.
pub const BODY_EXCERPT_BYTES: usize = 1024;

/// The meaning of one attempt's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// 2xx: the subscriber has the event.
    Delivered {
        /// HTTP status.
        status: u16,
    },
    /// 410: the subscriber asks to stop receiving; it is disabled.
    Gone {
        /// The first 1 KiB of the body.
        body: String,
    },
    /// A status that retrying will not change.
    Rejected {
        /// HTTP status.
        status: u16,
        /// The first 1 KiB of the body (cut at a character boundary).
        body: String,
    },
    /// Worth retrying later.
    Retry {
        /// Why, in a few words (`HTTP 503`, `timeout`, `connection refused …`).
        reason: String,
        /// The receiver's `Retry-After`, if it sent one.
        retry_after: Option<Duration>,
    },
}

impl Outcome {
    /// Classifies an HTTP answer.
    pub fn from_status(status: u16, retry_after: Option<Duration>, body: &[u8]) -> Self {
        match status {
            200..=299 => Outcome::Delivered { status },
            410 => Outcome::Gone { body: excerpt(body) },
            408 | 429 | 500..=599 => Outcome::Retry { reason: format!("HTTP {status}"), retry_after },
            _ => Outcome::Rejected { status, body: excerpt(body) },
        }
    }

    /// A short readable reason (for logs and dead-letter attributes).
    pub fn reason(&self) -> String {
        match self {
            Outcome::Delivered { status } => format!("delivered (HTTP {status})"),
            Outcome::Gone { .. } => "HTTP 410 Gone: subscriber disabled".to_owned(),
            Outcome::Rejected { status, body } => format!("HTTP {status}: {body}"),
            Outcome::Retry { reason, .. } => reason.clone(),
        }
    }
}

/// The first [`BODY_EXCERPT_BYTES`] of `body` as text (lossy UTF-8, cut at a character boundary).
pub(crate) fn excerpt(body: &[u8]) -> String {
    let mut end = body.len().min(BODY_EXCERPT_BYTES);
    // A cut inside a multi-byte character backs up to its first byte (continuation bytes are 0b10xx_xxxx).
    while end > 0 && end < body.len() && body[end] & 0xC0 == 0x80 {
        end -= 1;
    }
    String::from_utf8_lossy(&body[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_class_has_its_outcome() {
        let ra = Some(Duration::from_secs(7));
        for s in [200, 201, 202, 204, 299] {
            assert_eq!(Outcome::from_status(s, None, b""), Outcome::Delivered { status: s });
        }
        assert_eq!(Outcome::from_status(410, None, b"bye"), Outcome::Gone { body: "bye".into() });
        for s in [408, 429, 500, 502, 503, 504, 599] {
            assert_eq!(Outcome::from_status(s, ra, b"x"), Outcome::Retry { reason: format!("HTTP {s}"), retry_after: ra });
        }
        for s in [301, 302, 307, 400, 401, 403, 404, 405, 413, 422] {
            assert_eq!(Outcome::from_status(s, ra, b"no"), Outcome::Rejected { status: s, body: "no".into() });
        }
    }

    #[test]
    fn the_body_excerpt_is_one_kib_at_a_character_boundary() {
        assert_eq!(excerpt(&[b'a'; 5000]).len(), 1024);
        let mut body = vec![b'a'; 1023];
        body.extend("é and more".as_bytes());
        let cut = excerpt(&body);
        assert_eq!(cut.len(), 1023);
        assert!(cut.chars().all(|c| c == 'a'));
    }
}
