//! `outbox-local`: run the SAM template's functions locally against the moto emulator.
//!
//! ```text
//! outbox-local demo [--orders N] [--json]      # the whole pipeline on the sample inputs
//! outbox-local up [--port 3000]                # stack + HTTP API + pipelines until Ctrl-C
//! outbox-local invoke <LogicalId> -e <event>   # one handler, one event; response on stdout
//! outbox-local dlq list [--json] | show <id> | redrive [--dry-run] [--force] [--yes] | purge | archive <file>
//!                  [--id ID]… [--cause CAUSE] [--older-than 7d]   # select messages
//! outbox-local dlq practice                    # make one real dead letter on a running `up`
//! outbox-local trace <event-id> [--aggregate A --sequence N | --scan] [--json]   # where is event X
//! outbox-local webhooks attempts <event-id> --subscriber S | resend <event-id> --subscriber S
//!                  | recover --subscriber S --since T | enable S [--recover] [--since T]
//! outbox-local ordering release --consumer C --aggregate Order#o-1 --through N   # unblock a sequence gap
//! outbox-local provision                       # create the stack on --endpoint and exit
//! outbox-local proof [--orders N] [--plan P]    # the pipeline under a fault plan, invariants checked
//! ```
//!
//! Without `--endpoint` (or `AWS_ENDPOINT_URL`), `up`, `demo`, `invoke` and `provision` start
//! their own moto server on a free loopback port; `dlq`, `trace`, `webhooks` and `ordering` are the
//! operator's CLI's verbs (crate `outbox-cli`, binary `outbox`: one implementation) on this
//! template's stack, and use the ordinary AWS configuration without `--endpoint`.
//! `up`, `demo` and `invoke` first build the template's function binaries with one
//! `cargo build --bin …` beside the template (`invoke X`: only X's; `--no-build` when they are
//! prebuilt, with `--target-dir` or `CARGO_TARGET_DIR` where no Cargo project is beside the
//! template) and run each function as its real binary, served the Lambda Runtime API. `up` and
//! `demo` skip, with a warning, functions without `Metadata.BuildProperties.Binary`.

use std::process::ExitCode;

use clap::Parser;

mod cli;

use cli::{Cli, Command};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_filter = match (&cli.command, cli.verbose) {
        (_, true) => "info",
        (Command::Demo(_), false) => "off",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into()))
        .init();
    match cli::run(cli).await {
        Ok(code) => code,
        Err(message) => {
            eprintln!("outbox-local: {message}");
            ExitCode::FAILURE
        }
    }
}
