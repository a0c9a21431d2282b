//! Property tests of the webhook signature check (proptest): it never panics, whatever the
//! three headers, the body and the clock hold, and accepts exactly the requests signed with a
//! current secret.

mod signatures {
    use outbox_webhooks::signature::{signature_header, WEBHOOK_ID, WEBHOOK_TIMESTAMP};
    use outbox_webhooks::{Secret, SignedHeaders, Verifier};
    use proptest::prelude::*;

    /// A header value as a receiver may see it: absent, empty, or any text (visible or not).
    fn header() -> impl Strategy<Value = Option<String>> {
        proptest::option::of(prop_oneof!["\\PC{0,80}", ".{0,80}", "(v1,[A-Za-z0-9+/=]{0,48} ?){0,4}", "-?[0-9]{1,25}"])
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

        #[test]
        fn verifying_never_panics_on_arbitrary_headers(
            id in header(), timestamp in header(), signature in header(),
            body in prop::collection::vec(any::<u8>(), 0..256), now in any::<i64>(), tolerance in any::<u64>(),
        ) {
            let headers = SignedHeaders { id: id.as_deref(), timestamp: timestamp.as_deref(), signature: signature.as_deref() };
            let verifier = Verifier::new(vec![Secret::generate()]).with_tolerance(std::time::Duration::from_secs(tolerance));
            let result = verifier.verify(&headers, &body, now);
            // A random signature never matches a fresh secret. A missing id or timestamp is named
            // (the signature is looked at only after the timestamp is valid).
            prop_assert!(result.is_err());
            if let Some(missing @ (WEBHOOK_ID | WEBHOOK_TIMESTAMP)) = headers.missing() {
                prop_assert_eq!(result.unwrap_err().header(), missing);
            }
        }

        #[test]
        fn a_request_signed_with_a_current_secret_verifies_and_any_other_change_fails(
            id in "[!-~]{1,40}", body in prop::collection::vec(any::<u8>(), 0..256), now in 0i64..4_000_000_000, skew in -300i64..=300,
            flip in any::<usize>(),
        ) {
            let (current, previous) = (Secret::generate(), Secret::generate());
            let timestamp = now - skew;
            let header = signature_header(std::slice::from_ref(&current), &id, timestamp, &body);
            let ts = timestamp.to_string();
            let signed = SignedHeaders { id: Some(&id), timestamp: Some(&ts), signature: Some(&header) };
            prop_assert_eq!(Verifier::new(vec![previous.clone(), current.clone()]).verify(&signed, &body, now), Ok(id.as_str()));
            prop_assert!(Verifier::new(vec![previous]).verify(&signed, &body, now).is_err(), "another secret");
            let mut tampered = body.clone();
            if tampered.is_empty() { tampered.push(0) } else { let i = flip % tampered.len(); tampered[i] ^= 1 }
            prop_assert!(Verifier::new(vec![current.clone()]).verify(&signed, &tampered, now).is_err(), "one bit of the body");
            prop_assert!(Verifier::new(vec![current]).verify(&signed, &body, now + 301 + skew.abs()).is_err(), "stale");
        }
    }
}
