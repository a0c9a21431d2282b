//! Fault injection between the functions and the emulator: the faults that break delivery
//! promises in production, played on demand and repeatably (a seeded plan).
//!
//! * [`plan`]: the fault plan (TOML, or built by tests): per operation error rates with AWS's
//!   wire codes, `PutEvents` entry failures, timed outages (`from_s`..`until_s`), latency and
//!   stalls, lost answers, instance crashes after the k-th AWS call, TTL deletion sweeps.
//! * [`proxy`]: the [`Injector`], an HTTP proxy each instance gets as its `AWS_ENDPOINT_URL`
//!   (set `RuntimeOptions::faults`); the runtime's own glue (stream polling,
//!   rule delivery, dead-letter sends) talks to the emulator directly, as AWS's does.
//! * [`ttl`]: DynamoDB's TTL deletion with the service's `REMOVE` stream records.

pub mod plan;
pub mod proxy;
pub mod ttl;

pub use plan::{Fault, FaultKind, FaultPlan, Roles, TtlSweep};
pub use proxy::{Attached, Injected, Injector, ServiceHealth};
