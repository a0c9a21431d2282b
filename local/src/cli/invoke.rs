//! `outbox-local invoke`: one function, one event (like `sam local invoke -e`).

use std::path::PathBuf;
use std::process::ExitCode;

use outbox_template::Template;

use super::session::{local, seed_sample_stock};
use super::Invocation;

/// `invoke`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct InvokeArgs {
    /// Logical id of the function in the template, e.g. ProducerFunction.
    pub logical_id: String,
    /// Event file (JSON), e.g. events/create-order.json; `-` reads stdin.
    #[arg(short = 'e', long = "event")]
    pub event: PathBuf,
}

/// Runs `invoke`.
///
/// # Errors
/// What failed, as text.
pub(crate) async fn run(inv: &Invocation, template: Template, args: &InvokeArgs) -> outbox_local::Result<ExitCode> {
    let cli = &inv.cli;
    let root = inv.root.as_path();
    let stack_name = inv.stack_name.as_str();
    let InvokeArgs { logical_id, event } = args;
    check_function(&template, logical_id)?;
    let payload = if event.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).map_err(outbox_local::Error::other("stdin"))?
    } else {
        std::fs::read_to_string(event).map_err(outbox_local::Error::other(format!("{}", event.display())))?
    };
    serde_json::from_str::<serde::de::IgnoredAny>(&payload).map_err(outbox_local::Error::other(format!("{}: not JSON", event.display())))?;
    let local = local(cli, template, root, stack_name, false, Some(logical_id)).await?;
    let function = local.runtime.function(logical_id)?;
    seed_sample_stock(&local.runtime).await;
    let invocation = function.invoke(&payload).await;
    local.runtime.stop_functions();
    match invocation.result {
        Ok(response) => {
            println!("{}", serde_json::to_string_pretty(&response).map_err(outbox_local::Error::other("the response as JSON"))?);
            Ok(ExitCode::SUCCESS)
        }
        Err(d) => {
            println!("{}", serde_json::json!({"errorType": d.error_type, "errorMessage": d.error_message}));
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Checks that `logical_id` is a function of `template` that the local runtime can run.
fn check_function(template: &Template, logical_id: &str) -> outbox_local::Result<()> {
    let ids = template.function_ids();
    if !ids.iter().any(|id| id == logical_id) {
        return Err(outbox_local::Error::invalid(format!(
            "no function {logical_id:?} in {}; functions: {}",
            template.path.display(),
            ids.join(", ")
        )));
    }
    let (_, skipped) = template.runnable_functions()?;
    if skipped.iter().any(|id| id == logical_id) {
        return Err(outbox_local::Error::from(outbox_template::no_binary(logical_id)));
    }
    Ok(())
}
