//! Helpers shared by the library's integration tests.

use std::collections::HashMap;

use metrics_util::debugging::{DebugValue, Snapshotter};

/// Every metric recorded so far, keyed `Name[labels]` (e.g. `DeadLetteredByReason["reason=Rejected"]`).
pub(crate) fn recorded(snapshotter: &Snapshotter) -> HashMap<String, DebugValue> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let labels: Vec<String> = key.key().labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
            (format!("{}{:?}", key.key().name(), labels), value)
        })
        .collect()
}

/// The counter `name` of `values`; panics naming what was recorded instead.
pub(crate) fn counter(values: &HashMap<String, DebugValue>, name: &str) -> u64 {
    match values.get(name) {
        Some(DebugValue::Counter(n)) => *n,
        other => panic!("{name}: {other:?} in {:?}", values.keys().collect::<Vec<_>>()),
    }
}
