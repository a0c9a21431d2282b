//! What runs the whole pipeline: [`demo`] (the sample inputs, stage by stage), [`proof`] (the
//! pipeline under a fault plan, the invariants checked from the tables and queues) and
//! [`practice`] (one real dead letter to practise the `dlq` verbs on).

pub mod demo;
pub mod practice;
pub mod proof;
