//! The bus the relay publishes to: the one place where the classic event bus and the Custom
//! Event Bus differ. Everything else in [`super`] (classify, plan, send, retry, dead-letter,
//! checkpoint) is the same for both.
//!
//! | | classic (`EVENT_BUS_TYPE=Classic`, the default) | Custom (`EVENT_BUS_TYPE=Custom`, feature `custom-bus`) |
//! |---|---|---|
//! | client | `aws-sdk-eventbridge` (JSON) | `aws-sdk-eventbridgev2` (Smithy RPC v2 CBOR), rust-version 1.94.1 |
//! | bus | name or ARN, in each entry's `EventBusName` | `event-busv2` ARN, the request's `EventBusArn` |
//! | entries per call | [`MAX_ENTRIES_PER_CALL`](super::MAX_ENTRIES_PER_CALL) (10) | [`MAX_ENTRIES_PER_CUSTOM_CALL`] (100) |
//! | per entry | `TraceHeader` (the producer's X-Ray header) | `SystemMetadata { EventGroupId, DeduplicationId }`; no `TraceHeader` field, so the X-Ray header is not sent |
//! | success | an `EventId` | no `ErrorCode`; `SuccessCode` `PUBLISHED`, or `DEDUPLICATED` (counted as published, and in [`RelayReport::deduplicated`](super::RelayReport::deduplicated)) |
//! | permanent entry codes | [`PERMANENT_ERROR_CODES`](super::PERMANENT_ERROR_CODES) | the same, and `InvalidInputException` ([`PERMANENT_CUSTOM_ERROR_CODES`]) |
//!
//! `EventGroupId` = [`event_group_id`] (`<aggregate_type>#<aggregate_id>`, the outbox item's
//! partition key, when it is at most [`MAX_EVENT_GROUP_ID_CHARS`] characters that an SQS FIFO
//! `MessageGroupId` takes too; else `sha256:<hex>` of it: never truncated, since two aggregates
//! would then share a group). `DeduplicationId` = the outbox event id: a record delivered again by the
//! stream within the bus's 300 s deduplication window is answered `DEDUPLICATED` and not
//! published twice. Sources: the Custom Event Bus API reference (`PutEvents`,
//! `PutEventsRequestEntry`, `PutEventsSystemMetadata`, `PutEventsResultEntry`); the user guide's
//! "Names, endpoints, and IAM permissions for the Custom Event Bus" (ARN `event-busv2`, IAM
//! actions `events:`). The API reference lists no per-entry error codes for the Custom bus: the
//! classic bus's permanent ones are kept, and any other code is transient, as with the classic bus.

use std::fmt;
use std::str::FromStr;

use super::EntryFailure;
use crate::envelope::{BusEvent, OutboxItem};

/// Most entries in one Custom Event Bus `PutEvents` call (API reference, `PutEvents`: `Entries`,
/// 1-100 items).
pub const MAX_ENTRIES_PER_CUSTOM_CALL: usize = 100;

/// Longest `EventGroupId` / `DeduplicationId`, in characters (API reference,
/// `PutEventsSystemMetadata`: 1-128).
pub const MAX_EVENT_GROUP_ID_CHARS: usize = 128;

/// Entry error codes of the Custom bus that no retry can fix; any other code is transient.
pub const PERMANENT_CUSTOM_ERROR_CODES: [&str; 3] = ["MalformedDetail", "InvalidArgument", "InvalidInputException"];

/// Which bus the relay publishes to (the relay function's `EVENT_BUS_TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum BusType {
    /// The classic event bus (rules and targets): `aws-sdk-eventbridge`, 10 entries a call.
    #[default]
    Classic,
    /// The Custom Event Bus (subscribers, FIFO per event group): `aws-sdk-eventbridgev2`, 100
    /// entries a call (feature `custom-bus`).
    Custom,
}

impl BusType {
    /// `Classic` or `Custom`, as `EVENT_BUS_TYPE` and the template's `EventBusType` spell it.
    pub fn as_str(&self) -> &'static str {
        match self {
            BusType::Classic => "Classic",
            BusType::Custom => "Custom",
        }
    }
}

impl fmt::Display for BusType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A bus type that is neither `Classic` nor `Custom` (case-sensitive, as the template's
/// `AllowedValues`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a bus type: use Classic or Custom")]
#[non_exhaustive]
pub struct BusTypeError(pub String);

impl FromStr for BusType {
    type Err = BusTypeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "Classic" => Ok(BusType::Classic),
            "Custom" => Ok(BusType::Custom),
            other => Err(BusTypeError(other.to_owned())),
        }
    }
}

/// A Custom Event Bus ARN that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a Custom Event Bus ARN: expected arn:<partition>:events:<region>:<12-digit account>:event-busv2/<name>/<25 lowercase letters or digits> (the bus's EventBusArn)"
)]
#[non_exhaustive]
pub struct CustomBusArnError(pub String);

/// Checks `arn` against the shape the API reference gives for `EventBusArn` (`PutEvents`):
/// `arn:aws[-x]:events:<region>:<12 digits>:event-busv2/<name>/<25 of [a-z0-9]>`, the name
/// 1-256 of `[A-Za-z0-9._-]` starting with a letter or digit.
///
/// # Errors
/// [`CustomBusArnError`] with the value, e.g. for a bus name or a classic bus ARN (`event-bus/`).
pub fn check_custom_bus_arn(arn: &str) -> Result<(), CustomBusArnError> {
    let bad = || CustomBusArnError(arn.to_owned());
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let [prefix, partition, service, region, account, resource] = parts.as_slice() else { return Err(bad()) };
    let lower_alnum = |s: &str| s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let ok_partition = *partition == "aws" || partition.strip_prefix("aws-").is_some_and(|p| !p.is_empty() && lower_alnum(p));
    let ok_region = !region.is_empty() && region.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let ok_account = account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit());
    let ok_resource = match resource.split('/').collect::<Vec<_>>().as_slice() {
        ["event-busv2", name, suffix] => {
            let name_ok = (1..=256).contains(&name.len())
                && name.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
            name_ok && suffix.len() == 25 && lower_alnum(suffix)
        }
        _ => false,
    };
    if *prefix == "arn" && ok_partition && *service == "events" && ok_region && ok_account && ok_resource {
        Ok(())
    } else {
        Err(bad())
    }
}

/// The Custom bus's `EventGroupId` of an outbox item: [`aggregate_group_id`] of its aggregate.
pub fn event_group_id(item: &OutboxItem) -> String {
    aggregate_group_id(&item.aggregate_type, &item.aggregate_id)
}

/// The Custom bus's `EventGroupId` of aggregate (`aggregate_type`, `aggregate_id`), one group per
/// aggregate so that its events stay in order:
/// - `<aggregate_type>#<aggregate_id>` (the outbox partition key, [`OutboxItem::partition_key`])
///   when it is 1-[`MAX_EVENT_GROUP_ID_CHARS`] characters of printable ASCII without spaces:
///   what `EventGroupId` takes (1-128, `PutEventsSystemMetadata`) and what an SQS FIFO queue
///   takes as the `MessageGroupId` a subscriber copies it into ("alphanumeric characters and
///   punctuation", up to 128; SQS API reference, `SendMessage`);
/// - else `sha256:<64 lowercase hex digits>` of its UTF-8 bytes (71 characters): an id with a
///   space or a non-ASCII letter, or a longer one, is never truncated (two aggregates would then
///   share a group) nor refused (it could never be delivered to a FIFO queue).
pub fn aggregate_group_id(aggregate_type: &str, aggregate_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let key = OutboxItem::partition_key(aggregate_type, aggregate_id);
    let plain = key.len() <= MAX_EVENT_GROUP_ID_CHARS && key.bytes().all(|b| b.is_ascii_graphic());
    if plain {
        key
    } else {
        format!("sha256:{}", hex::encode(Sha256::digest(key.as_bytes())))
    }
}

/// How an accepted entry was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Accepted {
    /// Published (classic: an `EventId`; Custom: `SuccessCode` `PUBLISHED` or none).
    Published,
    /// The Custom bus had seen its `DeduplicationId` within 300 s: not published again.
    Deduplicated,
}

/// The client of the bus the relay publishes to.
#[derive(Debug, Clone)]
pub(crate) enum Publisher {
    Classic(aws_sdk_eventbridge::Client),
    #[cfg(feature = "custom-bus")]
    Custom(aws_sdk_eventbridgev2::Client),
}

impl Publisher {
    /// Most entries in one call.
    pub(crate) fn max_entries(&self) -> usize {
        match self {
            Publisher::Classic(_) => super::MAX_ENTRIES_PER_CALL,
            #[cfg(feature = "custom-bus")]
            Publisher::Custom(_) => MAX_ENTRIES_PER_CUSTOM_CALL,
        }
    }

    /// The entry's size against the request limit: [`BusEvent::entry_size`], on the Custom bus
    /// plus the UTF-8 bytes of its `EventGroupId` and `DeduplicationId` (counted as the local
    /// runtime's Custom bus counts them: an upper bound).
    #[cfg_attr(not(feature = "custom-bus"), allow(unused_variables))] // `item` is read by the Custom arm only
    pub(crate) fn entry_size(&self, item: &OutboxItem, event: &BusEvent) -> usize {
        match self {
            Publisher::Classic(_) => event.entry_size(),
            #[cfg(feature = "custom-bus")]
            Publisher::Custom(_) => event.entry_size() + event_group_id(item).len() + item.event_id.len(),
        }
    }

    /// Why `item` can never be published on this bus (error code, reason), if it cannot: on the
    /// Custom bus, a `DeduplicationId` (the event id) over [`MAX_EVENT_GROUP_ID_CHARS`] (the
    /// `EventGroupId` always fits: [`aggregate_group_id`]).
    #[cfg_attr(not(feature = "custom-bus"), allow(unused_variables))] // `item` is read by the Custom arm only
    pub(crate) fn refuses(&self, item: &OutboxItem) -> Option<(&'static str, String)> {
        match self {
            Publisher::Classic(_) => None,
            #[cfg(feature = "custom-bus")]
            Publisher::Custom(_) => {
                let chars = item.event_id.chars().count();
                (chars > MAX_EVENT_GROUP_ID_CHARS).then(|| {
                    (
                        "DeduplicationIdTooLong",
                        format!(
                            "the event id is {chars} characters; the Custom Event Bus takes at most {MAX_EVENT_GROUP_ID_CHARS} (DeduplicationId)"
                        ),
                    )
                })
            }
        }
    }

    /// One `PutEvents` call of `events` (item, event) to `bus`; each entry's result, by position.
    /// A whole-request failure (after the SDK's own retries) fails every entry transiently:
    /// never poison, since access denied or a missing bus would otherwise dead-letter every
    /// event; such a permanent one is logged at ERROR as a configuration error.
    pub(crate) async fn put(&self, bus: &str, events: &[(&OutboxItem, &BusEvent)]) -> Vec<Result<Accepted, EntryFailure>> {
        let n = events.len();
        let answered = match self {
            Publisher::Classic(client) => {
                let entries = events.iter().map(|(_, e)| e.to_entry(bus)).collect::<Vec<_>>();
                client
                    .put_events()
                    .set_entries(Some(entries))
                    .send()
                    .await
                    .map(|output| {
                        let results = output.entries().iter().map(|r| match (r.error_code(), r.event_id()) {
                            (None, Some(_)) => Ok(Accepted::Published),
                            (code, _) => {
                                Err(EntryFailure::entry(code.unwrap_or("InternalFailure"), r.error_message().unwrap_or("entry has no EventId")))
                            }
                        });
                        results.collect::<Vec<_>>()
                    })
                    .map_err(|e| crate::aws_error::AwsError::from_sdk("PutEvents", &e))
            }
            #[cfg(feature = "custom-bus")]
            Publisher::Custom(client) => {
                use aws_sdk_eventbridgev2::types::SuccessCode;
                let entries = events.iter().map(|(item, e)| e.to_custom_entry(&event_group_id(item), &item.event_id)).collect::<Vec<_>>();
                client
                    .put_events()
                    .event_bus_arn(bus)
                    .set_entries(Some(entries))
                    .send()
                    .await
                    .map(|output| {
                        let results = output.entries().iter().map(|r| match (r.error_code(), r.success_code()) {
                            (None, Some(SuccessCode::Deduplicated)) => Ok(Accepted::Deduplicated),
                            (None, _) => Ok(Accepted::Published),
                            (Some(code), _) => Err(EntryFailure::custom_entry(code, r.error_message().unwrap_or("entry failed"))),
                        });
                        results.collect::<Vec<_>>()
                    })
                    .map_err(|e| crate::aws_error::AwsError::from_sdk("PutEvents", &e))
            }
        };
        match answered {
            Ok(results) if results.len() == n => results,
            Ok(results) => {
                let failure = EntryFailure::entry("InternalFailure", &format!("PutEvents answered {} entries for {n}", results.len()));
                vec![Err(failure); n]
            }
            Err(aws) => {
                if !aws.is_retryable() {
                    tracing::error!(error = %aws, "PutEvents failed permanently; failing the records (a configuration error?)");
                }
                let failure =
                    EntryFailure { code: aws.code.clone().unwrap_or_else(|| "RequestFailed".into()), message: aws.to_string(), retryable: true };
                vec![Err(failure); n]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARN: &str = "arn:aws:events:us-east-1:123456789012:event-busv2/orders/abcdefghij0123456789klmno";

    #[test]
    fn bus_types_parse_as_the_template_spells_them() {
        assert_eq!("Classic".parse::<BusType>(), Ok(BusType::Classic));
        assert_eq!("Custom".parse::<BusType>(), Ok(BusType::Custom));
        let err = "custom".parse::<BusType>().unwrap_err();
        assert_eq!(err.to_string(), r#""custom" is not a bus type: use Classic or Custom"#);
        assert_eq!(BusType::default(), BusType::Classic);
    }

    #[test]
    fn custom_bus_arns_are_checked() {
        assert_eq!(check_custom_bus_arn(ARN), Ok(()));
        assert_eq!(check_custom_bus_arn("arn:aws-cn:events:cn-north-1:123456789012:event-busv2/o.r-d_1/abcdefghij0123456789klmno"), Ok(()));
        for bad in [
            "orders",
            "arn:aws:events:us-east-1:123456789012:event-bus/orders",
            "arn:aws:events:us-east-1:123456789012:event-busv2/orders",
            "arn:aws:events:us-east-1:123456789012:event-busv2/orders/ABCDEFGHIJ0123456789KLMNO",
            "arn:aws:events:us-east-1:123456789012:event-busv2/orders/abc",
            "arn:aws:events:us-east-1:12345:event-busv2/orders/abcdefghij0123456789klmno",
            "arn:aws:sqs:us-east-1:123456789012:event-busv2/orders/abcdefghij0123456789klmno",
            "arn:aws:events:us-east-1:123456789012:event-busv2/-orders/abcdefghij0123456789klmno",
        ] {
            let err = check_custom_bus_arn(bad).unwrap_err();
            assert!(err.to_string().contains("is not a Custom Event Bus ARN"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_event_group_is_the_aggregate() {
        let item = OutboxItem::new("e-1", "OrderCreated", "example.orders", ("Order", "o-1"), 1, "2026-11-29T08:00:00Z", "{}");
        assert_eq!(event_group_id(&item), "Order#o-1");
        let long = "x".repeat(123);
        for odd in [long.as_str(), "o 1", "ordre-é"] {
            let group = aggregate_group_id("Order", odd);
            assert!(group.starts_with("sha256:") && group.len() == 71, "{group}");
            assert_eq!(group, aggregate_group_id("Order", odd), "one group per aggregate");
            assert_ne!(group, aggregate_group_id("Order", &format!("{odd}2")));
        }
        assert_eq!(aggregate_group_id("Order", &"x".repeat(122)), format!("Order#{}", "x".repeat(122)), "128 characters fit");
    }
}
