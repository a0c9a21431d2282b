//! `outbox-local token`: a token of the local issuer, signed with the key in
//! `.local/<stack>/issuer-key.der` (created when absent). A running `up` accepts it even when the
//! file was created after `up` started: `up` reads the key file again at the first token whose
//! `kid` it does not know (`outbox_local::runtime::issuer_keys`).

use std::process::ExitCode;

use outbox_template::Template;

use super::session::state_dir;
use super::Invocation;

/// `token`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct TokenArgs {
    /// The token's subject (`sub`): the caller, who owns the orders it creates.
    #[arg(long)]
    pub sub: String,
    /// A scope to put in the token's `scope` claim (repeatable), e.g. `orders/admin`.
    #[arg(long)]
    pub scope: Vec<String>,
    /// Lifetime, seconds.
    #[arg(long, default_value_t = outbox_local::runtime::authorizer::DEFAULT_TOKEN_SECONDS)]
    pub ttl: i64,
}

/// Runs `token`.
///
/// # Errors
/// What failed, as text.
pub(crate) async fn run(inv: &Invocation, _template: Template, args: &TokenArgs) -> outbox_local::Result<ExitCode> {
    let root = inv.root.as_path();
    let stack_name = inv.stack_name.as_str();
    let TokenArgs { sub, scope, ttl } = args;
    // The key `up` and `demo` use for this stack (created now when they never ran, or after the
    // file was deleted: a running `up` picks the new key up).
    let issuer = outbox_local::runtime::authorizer::LocalIssuer::load_or_create(&state_dir(root, stack_name))?;
    println!("{}", issuer.token(sub, scope, *ttl));
    Ok(ExitCode::SUCCESS)
}
