//! `outbox`: the operator's CLI for a deployed outbox stack.
//!
//! ```text
//! outbox --stack NAME dlq list [--json] | show <id> | redrive [--dry-run] [--force] | purge | archive <file>
//! outbox --stack NAME trace <event-id> [--aggregate Order#o-1 --sequence 3 | --scan] [--json]
//! outbox --stack NAME ordering parked | release --consumer C --aggregate A --through N
//! outbox --stack NAME webhooks attempts | resend | recover | enable
//! outbox --stack NAME replay --since T [--until T] (--consumer C | --all) [--type T] [--source S] [--no-wait]
//! outbox --stack NAME replay (--consumer C | --all) --cleanup [--force]   # Custom bus: finished replay subscribers
//! ```
//!
//! AWS with the ordinary configuration (profile, region, credentials: `--profile`, `--region`
//! or the environment). The resources come from the deployed stack (`--stack`: CloudFormation's
//! resources and outputs, nested stacks followed) or from a template (`--template`, its names
//! resolved as `--stack-name`, its parameters as deployed with `--parameter-overrides`). `--endpoint-url` (or `AWS_ENDPOINT_URL`) points it at an
//! emulator, with dummy credentials. Destructive verbs say what they will do and ask, unless
//! `--yes`.

use std::path::PathBuf;
use std::process::ExitCode;

use aws_config::{BehaviorVersion, Region};
use clap::Parser;
use outbox_cli::aws::{check_endpoint, sdk_config, Target, EMULATOR_ACCOUNT};
use outbox_cli::cli::{self, Context, Operator, Source};

#[derive(Debug, Parser)]
#[command(
    name = "outbox",
    version,
    about = "Operate a deployed outbox stack: dead letters, failed stream batches, trace, ordering gaps, webhook deliveries, replays"
)]
struct Args {
    /// The deployed CloudFormation stack (name or ARN): its resources and outputs, nested stacks followed.
    #[arg(long, global = true, env = "OUTBOX_STACK", conflicts_with = "template")]
    stack: Option<String>,
    /// A SAM template instead of the deployed stack: its names resolved as --stack-name.
    #[arg(long, global = true)]
    template: Option<PathBuf>,
    /// With --template: the stack name `${AWS::StackName}` resolves to.
    #[arg(long, global = true, requires = "template")]
    stack_name: Option<String>,
    /// With --template: the parameters the stack was deployed with, as `sam deploy
    /// --parameter-overrides` (`Key=Value`, checked against AllowedValues; several: repeat the
    /// flag or quote them, `"A=1 B=2"`), e.g. `--parameter-overrides EventBusType=Custom`.
    #[arg(long, global = true, requires = "template", value_name = "KEY=VALUE", value_delimiter = ' ', value_parser = parse_override)]
    parameter_overrides: Vec<(String, String)>,
    /// An emulator's endpoint, e.g. http://127.0.0.1:5000 (dummy credentials).
    #[arg(long, global = true, env = "AWS_ENDPOINT_URL", alias = "endpoint")]
    endpoint_url: Option<String>,
    /// The AWS region (default: the ordinary configuration's).
    #[arg(long, global = true)]
    region: Option<String>,
    /// The AWS profile (default: AWS_PROFILE, else `default`).
    #[arg(long, global = true)]
    profile: Option<String>,
    /// Do not ask before destructive verbs.
    #[arg(long, short = 'y', global = true)]
    yes: bool,
    /// Log the AWS calls (info level) on stderr.
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Operator,
}

/// `Key=Value` of `--parameter-overrides`.
fn parse_override(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("{text:?}: expected Key=Value (as sam deploy --parameter-overrides)")),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let filter = if args.verbose { "info" } else { "warn" };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| filter.into()))
        .init();
    match run(args).await {
        Ok(code) => code,
        Err(message) => {
            eprintln!("outbox: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> outbox_cli::Result<ExitCode> {
    let sdk = match &args.endpoint_url {
        Some(endpoint) => {
            check_endpoint(endpoint)?;
            let region = args.region.clone().unwrap_or_else(outbox_cli::aws::region_from_env);
            sdk_config(&Target { endpoint: Some(endpoint.clone()), region }).await
        }
        None => {
            let mut loader = aws_config::defaults(BehaviorVersion::latest());
            if let Some(region) = &args.region {
                loader = loader.region(Region::new(region.clone()));
            }
            if let Some(profile) = &args.profile {
                loader = loader.profile_name(profile);
            }
            loader.load().await
        }
    };
    let source = match (&args.stack, &args.template) {
        (Some(stack), _) => Source::Stack(stack.clone()),
        (None, Some(path)) => {
            let dir = path.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
            let stack_name = args.stack_name.clone().unwrap_or_else(|| outbox_template::stack::default_stack_name(&dir));
            // On AWS the account only shapes ARNs built from the template; queue ARNs come from their URLs.
            let account = if args.endpoint_url.is_some() { EMULATOR_ACCOUNT } else { "000000000000" };
            Source::Template { path: path.clone(), stack_name, account: account.into(), overrides: args.parameter_overrides.clone() }
        }
        (None, None) => return Err(outbox_cli::Error::NoStack),
    };
    let resources = cli::resources(&sdk, &source).await?;
    cli::run(&Context { sdk, resources, yes: args.yes }, &args.command).await
}
