//! Glue between Lambda and the library (feature `lambda`).

use std::time::{Duration, Instant, SystemTime};

/// When the invocation must have answered, as an [`Instant`]: the Lambda context's
/// [`deadline`](lambda_runtime::Context::deadline) (the `Lambda-Runtime-Deadline-Ms` header of
/// the Runtime API, epoch milliseconds), or `fallback` from now when the context has none
/// (`deadline` 0, e.g. a context built in a test).
///
/// Source: the Lambda Runtime API reference, "Next invocation",
/// <https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html>.
pub fn deadline(context: &lambda_runtime::Context, fallback: Duration) -> Instant {
    if context.deadline == 0 {
        return Instant::now() + fallback;
    }
    let left = context.deadline().duration_since(SystemTime::now()).unwrap_or(Duration::ZERO);
    Instant::now() + left
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_without_deadline_gets_the_fallback_and_a_past_one_none() {
        let mut context = lambda_runtime::Context::default();
        let before = Instant::now();
        assert!(deadline(&context, Duration::from_secs(60)) >= before + Duration::from_secs(59));
        context.deadline = 1_000; // 1970
        assert!(deadline(&context, Duration::from_secs(60)) <= Instant::now());
    }
}
