//! What runs the whole pipeline: [`demo`] (the sample inputs, stage by stage), [`proof`] (the
//! pipeline under a fault plan, the invariants checked from the tables and queues) and
//! [`practice`] (one real dead letter to practise the `dlq` verbs on); [`books`]: the service's
//! business tables behind a trait, what the proof judges exactly-once by.

pub mod books;
pub mod demo;
pub mod practice;
pub mod proof;
