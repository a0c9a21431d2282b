//! `examples/my-service`'s books: customers (`CUSTOMER#<id>`: `email`) in the customers table,
//! written by `RegisterCustomerFunction` with their `CustomerRegistered` event in one
//! transaction, and welcome mails (`CUSTOMER#<id>` / `MAIL#<sent at>`: `email`, `event_id`) in
//! the welcome-mails table, one row per mail `WelcomeMailFunction` sent.
//!
//! The producer has no HTTP API: each request is a direct invocation
//! (`{"customer_id", "email"}`), answered `registered` (customer and event written) or `exists`
//! (a retry whose first attempt committed: nothing written). The mail table's key is the time
//! sent, so a second delivery applied twice would leave a second row: only the inbox keeps it
//! to one, and the check counts the rows. There is nothing to undo.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{env_var, scan, text, Checked, Invariant, Request, SampleBooks};
use crate::runtime::Runtime;

/// my-service's producer and consumer: the functions the books are chosen by
/// ([`super::detect`]).
pub const FUNCTIONS: [&str; 2] = [PRODUCER, CONSUMER];
const PRODUCER: &str = "RegisterCustomerFunction";
const CONSUMER: &str = "WelcomeMailFunction";

/// my-service's tables, by the names its functions are given.
#[derive(Debug, Clone)]
pub struct CustomerBooks {
    customers: String,
    mails: String,
    /// Makes this run's customer ids new on a stack that has customers from another run.
    run: String,
}

impl CustomerBooks {
    /// The books of my-service's stack: `CUSTOMERS_TABLE` of `RegisterCustomerFunction`,
    /// `WELCOME_MAILS_TABLE` of `WelcomeMailFunction`.
    ///
    /// # Errors
    /// A function or variable the template does not have.
    pub fn of(runtime: &Runtime) -> crate::Result<Self> {
        Ok(Self {
            customers: env_var(runtime, PRODUCER, "CUSTOMERS_TABLE")?,
            mails: env_var(runtime, CONSUMER, "WELCOME_MAILS_TABLE")?,
            run: uuid::Uuid::new_v4().simple().to_string()[..8].to_owned(),
        })
    }
}

impl SampleBooks for CustomerBooks {
    fn name(&self) -> &'static str {
        "customers"
    }

    fn producer(&self) -> &str {
        PRODUCER
    }

    fn consumer(&self) -> &str {
        CONSUMER
    }

    async fn seed(&self, _dynamodb: &aws_sdk_dynamodb::Client) -> crate::Result<()> {
        Ok(())
    }

    fn request(&self, i: usize) -> Request {
        let id = format!("proof-{}-{i}", self.run);
        Request::Invoke { function: PRODUCER.into(), payload: json!({"customer_id": id, "email": format!("{id}@example.com")}).to_string() }
    }

    fn accepted(&self, answer: &Value) -> Option<String> {
        // `exists`: a retried request whose first attempt committed.
        matches!(answer["status"].as_str(), Some("registered" | "exists")).then(|| answer["customer_id"].as_str().map(str::to_owned)).flatten()
    }

    fn undo(&self, _id: &str) -> Option<Request> {
        None
    }

    async fn check(&self, dynamodb: &aws_sdk_dynamodb::Client, accepted: &[String]) -> crate::Result<Checked> {
        let customers: Vec<String> = scan(dynamodb, &self.customers, &["pk"])
            .await?
            .iter()
            .filter_map(|i| text(i, "pk").strip_prefix("CUSTOMER#").map(str::to_owned))
            .collect();
        let mut mails: BTreeMap<String, usize> = BTreeMap::new();
        for item in scan(dynamodb, &self.mails, &["pk"]).await? {
            if let Some(id) = text(&item, "pk").strip_prefix("CUSTOMER#") {
                *mails.entry(id.to_owned()).or_default() += 1;
            }
        }
        let first = |v: &[String]| v.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
        let wrong: Vec<String> = customers
            .iter()
            .filter_map(|id| match mails.get(id).copied().unwrap_or(0) {
                1 => None,
                n => Some(format!("{id} ({n} mails)")),
            })
            .collect();
        let missing: Vec<String> = accepted.iter().filter(|id| !customers.contains(id)).cloned().collect();
        let orphans: Vec<String> = mails.keys().filter(|id| !customers.contains(id)).cloned().collect();
        let invariants = vec![
            Invariant {
                name: "every registered customer was welcomed exactly once",
                held: wrong.is_empty() && missing.is_empty(),
                detail: format!(
                    "{} customers in the table, {} mails; {} customers without exactly one mail [{}]; {} answered but not in the table [{}]",
                    customers.len(),
                    mails.values().sum::<usize>(),
                    wrong.len(),
                    first(&wrong),
                    missing.len(),
                    first(&missing)
                ),
            },
            Invariant {
                name: "no effect without a registered customer",
                held: orphans.is_empty(),
                detail: format!("{} mails to no registered customer [{}]", orphans.len(), first(&orphans)),
            },
        ];
        Ok(Checked { committed: customers.len(), undone: 0, invariants })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_invoke_the_producer_and_a_retried_registration_counts_as_accepted() {
        let books = CustomerBooks { customers: "customers".into(), mails: "mails".into(), run: "r1".into() };
        let Request::Invoke { function, payload } = books.request(3) else { panic!("my-service's producer has no HTTP API") };
        assert_eq!(function, "RegisterCustomerFunction");
        assert_eq!(serde_json::from_str::<Value>(&payload).unwrap(), json!({"customer_id": "proof-r1-3", "email": "proof-r1-3@example.com"}));
        assert_eq!(books.accepted(&json!({"customer_id": "c-1", "status": "registered"})).as_deref(), Some("c-1"));
        assert_eq!(books.accepted(&json!({"customer_id": "c-1", "status": "exists"})).as_deref(), Some("c-1"));
        assert_eq!(books.accepted(&json!({"errorType": "Oops"})), None);
        assert_eq!(books.undo("c-1"), None);
        assert!(books.hot_aggregate(100).is_none(), "welcome-mail is not an ordered consumer");
    }
}
