//! `ParallelizationFactor` of a stream event source mapping, played locally: the records of one
//! shard are processed as up to `factor` concurrent batches ("lanes"), and "Lambda still ensures
//! in-order processing at the item (partition and sort key) level" (Using Lambda with DynamoDB,
//! <https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html>, concurrent batches per shard).
//!
//! So the unit of order is the **item key** (`dynamodb.Keys`: partition *and* sort key), not the
//! partition key: two outbox items of one aggregate (same `pk`, sequences 1 and 2 in `sk`) are
//! two items and may go to two lanes, processed concurrently, in either order. Locally a record
//! goes to lane `hash(item key) mod factor` (FNV-1a of the keys as canonical JSON, so the
//! assignment is the same on every run); AWS's assignment is internal, only the per-item-key
//! order is documented, and that is what this keeps: all records of one item key are in one
//! lane, in shard order.

use serde_json::Value;

/// The record's item key (`dynamodb.Keys`) as canonical JSON (object keys sorted).
pub fn item_key(record: &Value) -> String {
    record.pointer("/dynamodb/Keys").map(Value::to_string).unwrap_or_default()
}

/// The lane (0-based, below `factor`) of a record: the same for every record of one item key.
/// A factor below 1 counts as 1.
pub fn lane_of(record: &Value, factor: usize) -> usize {
    let factor = factor.max(1);
    // FNV-1a, 64 bit: stable across runs and platforms (std's hasher is randomly seeded).
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in item_key(record).bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % factor as u64) as usize
}

/// Splits a shard's batch (records in shard order) into the concurrent batches Lambda may run
/// with `ParallelizationFactor` = `factor`: positions into `records`, one list per non-empty
/// lane, each in shard order. With `factor` 1 this is the whole batch in one lane.
pub fn split(records: &[&Value], factor: usize) -> Vec<Vec<usize>> {
    let factor = factor.max(1);
    let mut lanes: Vec<Vec<usize>> = vec![Vec::new(); factor];
    for (position, record) in records.iter().enumerate() {
        lanes[lane_of(record, factor)].push(position);
    }
    lanes.into_iter().filter(|lane| !lane.is_empty()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The stream record of outbox event `sequence` of aggregate `Order#<id>`.
    fn event(id: &str, sequence: u64) -> Value {
        json!({"eventName": "INSERT", "dynamodb": {
            "Keys": {"pk": {"S": format!("Order#{id}")}, "sk": {"S": format!("{sequence:020}")}},
            "SequenceNumber": format!("{sequence:021}")}})
    }

    /// Where events 1 and 2 of an aggregate end up under `factor`.
    fn lanes_of_events_1_and_2(id: &str, factor: usize) -> Vec<Vec<usize>> {
        let (one, two) = (event(id, 1), event(id, 2));
        split(&[&one, &two], factor)
    }

    #[test]
    fn with_factor_1_events_1_and_2_of_an_aggregate_are_one_batch_in_order() {
        for i in 0..100 {
            assert_eq!(lanes_of_events_1_and_2(&format!("o-{i}"), 1), vec![vec![0, 1]]);
        }
    }

    /// The template's old `ParallelizationFactor: 2`: for some aggregates events 1 and 2 are two
    /// concurrent batches, so event 2 can be published before event 1. This is why the relay's
    /// mapping uses factor 1.
    #[test]
    fn with_factor_2_events_1_and_2_of_an_aggregate_can_be_concurrent_batches() {
        let split_apart = (0..100).filter(|i| lanes_of_events_1_and_2(&format!("o-{i}"), 2) == vec![vec![0], vec![1]]).count()
            + (0..100).filter(|i| lanes_of_events_1_and_2(&format!("o-{i}"), 2) == vec![vec![1], vec![0]]).count();
        assert!(split_apart > 0, "factor 2 never separated an aggregate's events 1 and 2 in 100 aggregates");
    }

    /// Under the template's setting for the relay's stream mapping, the two batches Lambda could
    /// run concurrently for events 1 and 2 of one aggregate are one batch, in sequence order:
    /// the relay publishes event 1 before event 2, for every aggregate.
    #[test]
    fn under_the_templates_setting_events_1_and_2_of_an_aggregate_are_relayed_in_order() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../template.yaml");
        let template = outbox_template::Template::load(&path).expect("the project's template loads");
        let functions = template.functions().expect("the template's functions");
        let relay = functions.iter().find(|f| f.logical_id == "Relay/RelayFunction").expect("the relay function");
        let factor = relay
            .events
            .iter()
            .find_map(|e| match e {
                outbox_template::FunctionEvent::DynamoDb(m) => Some(m.parallelization_factor),
                _ => None,
            })
            .expect("the relay's stream mapping");
        assert_eq!(factor, 1, "the relay's ParallelizationFactor");
        for i in 0..100 {
            assert_eq!(lanes_of_events_1_and_2(&format!("o-{i}"), factor), vec![vec![0, 1]], "aggregate o-{i}");
        }
    }

    #[test]
    fn records_of_one_item_key_always_share_a_lane_in_shard_order() {
        // The same item (key) written three times (e.g. INSERT, MODIFY, REMOVE) among others.
        let same = [event("x", 7), event("x", 7), event("x", 7)];
        let others: Vec<Value> = (0..20).map(|i| event(&format!("o-{i}"), 1)).collect();
        let mut records: Vec<&Value> = others.iter().collect();
        records.insert(3, &same[0]);
        records.insert(10, &same[1]);
        records.push(&same[2]);
        for factor in 1..=10 {
            let lanes = split(&records, factor);
            assert!(lanes.len() <= factor);
            let with_x: Vec<&Vec<usize>> = lanes.iter().filter(|l| l.iter().any(|&p| item_key(records[p]) == item_key(&same[0]))).collect();
            assert_eq!(with_x.len(), 1, "factor {factor}: item x in one lane");
            let xs: Vec<usize> = with_x[0].iter().copied().filter(|&p| item_key(records[p]) == item_key(&same[0])).collect();
            assert_eq!(xs, [3, 10, 22], "factor {factor}: in shard order");
            let mut all: Vec<usize> = lanes.concat();
            all.sort_unstable();
            assert_eq!(all, (0..records.len()).collect::<Vec<_>>(), "factor {factor}: every record in exactly one lane");
        }
    }
}
