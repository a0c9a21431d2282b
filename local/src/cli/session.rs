//! What the verbs share: the template and stack name, the emulator (given or our own), the stack
//! provisioned on it with the functions' binaries built, and a stack that already exists.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use aws_config::SdkConfig;
use outbox_cli::aws::{region_from_env, sdk_config, Target, EMULATOR_ACCOUNT};
use outbox_local::emulator::Emulator;
use outbox_local::faults::{FaultPlan, Injector};
use outbox_local::lambda::binaries;
use outbox_local::runtime::{Runtime, RuntimeOptions};
use outbox_template::stack::Stack;
use outbox_template::Template;

use super::{Cli, Command};

/// The stack, on the endpoint given or on an emulator of our own (kept alive with the value).
pub(crate) struct Local {
    pub runtime: Arc<Runtime>,
    pub _emulator: Option<Emulator>,
    pub endpoint: String,
}

/// A [`Local`] stack running: its HTTP API on a free loopback port and its pipelines, until
/// [`Running::stop`] (what `demo` and `proof` both start with).
pub(crate) struct Running {
    pub api: std::net::SocketAddr,
    pub stopped: tokio::sync::watch::Receiver<bool>,
    pub tasks: Vec<tokio::task::JoinHandle<()>>,
    stop: tokio::sync::watch::Sender<bool>,
    _server: tokio::task::JoinHandle<()>,
}

impl Local {
    /// Serves the HTTP API on a free loopback port and starts the pipelines.
    pub(crate) async fn start(&self) -> outbox_local::Result<Running> {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        let (api, server) = outbox_local::runtime::http_api::serve(&self.runtime, loopback, stopped.clone())
            .await
            .map_err(outbox_local::Error::io("the HTTP API's port"))?;
        let tasks = self.runtime.spawn_pipelines(stopped.clone())?;
        Ok(Running { api, stopped, tasks, stop, _server: server })
    }
}

impl Running {
    /// Stops the HTTP API and the pipelines (each given 3 s), then the functions' instances.
    pub(crate) async fn stop(self, runtime: &Runtime) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(3), t).await;
        }
        runtime.stop_functions();
    }
}

/// The emulator (when none is given), the provisioned stack, and the template's binaries built
/// and ready to run — only function `only`'s when given (`invoke`); otherwise functions without
/// a `Binary` are skipped with a warning.
pub(crate) async fn local(
    cli: &Cli,
    template: Template,
    root: &Path,
    stack_name: &str,
    announce: bool,
    only: Option<&str>,
) -> outbox_local::Result<Local> {
    Ok(local_with_faults(cli, template, root, stack_name, announce, only, None).await?.0)
}

/// Where the runtime keeps state for `stack_name` across restarts (checkpoints, the local
/// issuer's key).
pub(crate) fn state_dir(root: &Path, stack_name: &str) -> PathBuf {
    root.join(".local").join(stack_name)
}

/// [`local`] with `faults` injected between the functions and the emulator.
pub(crate) async fn local_with_faults(
    cli: &Cli,
    template: Template,
    root: &Path,
    stack_name: &str,
    announce: bool,
    only: Option<&str>,
    faults: Option<FaultPlan>,
) -> outbox_local::Result<(Local, Option<Arc<Injector>>)> {
    let (emulator, endpoint, sdk, stack) = provisioned(cli, template, stack_name, announce).await?;
    if only.is_none() {
        for id in &stack.skipped_functions {
            eprintln!("warning: {id} has no Metadata.BuildProperties.Binary (not a Rust binary?): skipped, its events are not wired");
        }
    }
    let bin_dirs = build_functions(cli, &stack, only).await?;
    let injector = faults.map(|plan| Injector::new(plan, &endpoint));
    // The stream mappings' checkpoints survive a restart of the runtime (on the same emulator:
    // a new emulator's streams have new ARNs, and their checkpoints start afresh).
    let state_dir = state_dir(root, stack_name);
    // When each event was published and delivered, for `trace` (best effort: without it, only
    // the times the stack's data holds).
    let journal = match outbox_local::journal::Journal::open(&state_dir) {
        Ok(journal) => Some(Arc::new(journal)),
        Err(e) => {
            eprintln!("warning: no timeline journal in {} ({e}): `trace` shows only the stored times", state_dir.display());
            None
        }
    };
    let options = RuntimeOptions {
        verbose: cli.verbose,
        max_instances: cli.max_instances.max(1),
        faults: injector.clone(),
        state_dir: Some(state_dir),
        journal: journal.clone(),
        ..RuntimeOptions::default()
    };
    // The demo and the proof must finish in minutes: they compress retry waits, and say so.
    let compress = cli.compress_retries || matches!(cli.command, Command::Demo(_) | Command::Proof(_));
    let options = if compress { options.compressed() } else { options };
    if announce {
        eprintln!("outbox-local: {}", options.retry_timing());
    }
    let env_file = cli.env_vars.clone().unwrap_or_else(|| root.join("local").join("env.json"));
    let environment = if cli.env_vars.is_some() || env_file.is_file() {
        let ids: Vec<String> = stack.functions.iter().map(|f| f.logical_id.clone()).collect();
        outbox_local::lambda::env_vars::load(&env_file, &ids)?
    } else {
        Default::default()
    };
    // The Custom Event Bus our endpoint plays: the same retry timing, the chosen FIFO blocking,
    // the plan's delivery faults, and its figures in the runtime's stats.
    if let Some(emulator) = &emulator {
        let bus_options = outbox_local::custom_bus::BusOptions::default().with_blocking(cli.fifo_blocking);
        emulator.custom_bus.configure(if compress { bus_options.compressed() } else { bus_options });
        emulator.custom_bus.set_faults(injector.clone());
        if let Some(journal) = &journal {
            emulator.set_journal(journal.clone());
        }
    }
    let options = RuntimeOptions { environment, ..options };
    let runtime = Runtime::with_functions(sdk, stack, options, &bin_dirs, only)?;
    if let Some(emulator) = &emulator {
        runtime.stats.watch_custom_bus(emulator.custom_bus.clone());
    }
    Ok((Local { runtime: Arc::new(runtime), _emulator: emulator, endpoint }, injector))
}

/// The emulator (ours unless `--endpoint`), its endpoint, and the stack provisioned on it.
pub(crate) async fn provisioned(
    cli: &Cli,
    template: Template,
    stack_name: &str,
    announce: bool,
) -> outbox_local::Result<(Option<Emulator>, String, SdkConfig, Stack)> {
    let (emulator, endpoint) = match &cli.endpoint {
        Some(e) => (None, e.clone()),
        None => {
            if announce {
                eprintln!("starting the moto emulator…");
            }
            let emulator = Emulator::start(&emulator_root(&template.path)).await?;
            let endpoint = emulator.endpoint.clone();
            (Some(emulator), endpoint)
        }
    };
    let sdk = sdk_config(&Target { endpoint: Some(endpoint.clone()), region: region_from_env() }).await;
    let stack = outbox_local::provision::provision(&sdk, template, stack_name, EMULATOR_ACCOUNT).await?;
    Ok((emulator, endpoint, sdk, stack))
}

/// Builds the stack's function binaries (only `only`'s when given), each in its CodeUri's Cargo
/// workspace (unless `--no-build`); returns where each one is.
pub(crate) async fn build_functions(cli: &Cli, stack: &Stack, only: Option<&str>) -> outbox_local::Result<binaries::BinDirs> {
    let functions: Vec<_> = stack.functions.iter().filter(|f| only.is_none_or(|id| f.logical_id == id)).cloned().collect();
    // Relative to where we run, not to the workspaces' roots where cargo runs.
    let target_dir = cli.target_dir.as_deref().map(std::path::absolute).transpose().map_err(outbox_local::Error::other("--target-dir"))?;
    let source = binaries::Source { prebuilt: cli.no_build, target_dir };
    tokio::task::spawn_blocking(move || binaries::prepare_functions(&functions, &source))
        .await
        .map_err(outbox_local::Error::other("building the functions"))?
        .map_err(outbox_local::Error::from)
}

/// Where `scripts/venv` (the emulator's virtualenv) is: the template's directory or its nearest
/// parent that has it, else this project's root.
pub(crate) fn emulator_root(template: &Path) -> PathBuf {
    template
        .ancestors()
        .skip(1)
        .find(|d| d.join("scripts/venv").is_file())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
}

pub(crate) fn find_template(explicit: Option<&Path>) -> outbox_local::Result<PathBuf> {
    if let Some(p) = explicit {
        return p.canonicalize().map_err(outbox_local::Error::io(p));
    }
    let cwd = std::env::current_dir().map_err(outbox_local::Error::other("the current directory"))?;
    cwd.ancestors()
        .map(|d| d.join("template.yaml"))
        .find(|p| p.is_file())
        .ok_or_else(|| outbox_local::Error::invalid(format!("no template.yaml in {} or its parents; pass --template", cwd.display())))
}

/// Ctrl-C (SIGINT) or SIGTERM, whichever comes first.
pub(crate) async fn wait_for_stop_signal() -> outbox_local::Result<()> {
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(outbox_local::Error::other("waiting for SIGTERM"))?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r.map_err(outbox_local::Error::other("waiting for Ctrl-C")),
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await.map_err(outbox_local::Error::other("waiting for Ctrl-C"))
    }
}

/// The seed items of the service's books file (`outbox-books.yaml` beside the template; the
/// sample's: stock for its SKUs) whose key is not in their table yet, so requests sent to `up`
/// or `invoke` find their reference data. Existing items are left alone; without a books file,
/// nothing.
pub(crate) async fn seed_sample_stock(runtime: &Runtime) {
    use outbox_local::scenarios::books::{self, Books};
    let template = &runtime.stack.template.path;
    if !books::path_for(template, None).exists() {
        return;
    }
    let dynamodb = aws_sdk_dynamodb::Client::new(&runtime.sdk);
    match Books::load(template, None) {
        Ok(books) => match books.seed_missing(runtime, &dynamodb).await {
            Ok(put) if !put.is_empty() => eprintln!("seeded from {}: {}", books.path.display(), put.join(", ")),
            Ok(_) => {}
            Err(e) => eprintln!("warning: could not seed from {}: {e}", books.path.display()),
        },
        Err(e) => eprintln!("warning: {e}"),
    }
}

/// The SDK configuration of the verbs that read an existing stack: `--endpoint` (the emulator),
/// else AWS with the ordinary configuration.
pub(crate) async fn target_sdk(cli: &Cli) -> SdkConfig {
    sdk_config(&Target { endpoint: cli.endpoint.clone(), region: region_from_env() }).await
}

/// The account id names are resolved with when looking a stack up: the emulator's, or a
/// placeholder on AWS (queue URLs are looked up by name there).
pub(crate) fn lookup_account(cli: &Cli) -> &'static str {
    if cli.endpoint.is_some() {
        EMULATOR_ACCOUNT
    } else {
        "000000000000"
    }
}

/// The SDK configuration and the names of a stack that already exists: on `--endpoint` (the
/// emulator), else on AWS with the ordinary configuration.
pub(crate) async fn existing_stack(cli: &Cli, template: Template, stack_name: &str) -> outbox_local::Result<(SdkConfig, Stack)> {
    let sdk = target_sdk(cli).await;
    let stack = Stack::look_up(&sdk, template, stack_name, lookup_account(cli)).await.map_err(|e| {
        let hint = match &cli.endpoint {
            Some(url) => format!("is the emulator at {url} running (e.g. `outbox-local up`) and provisioned as stack {stack_name:?}?"),
            None => format!(
                "this talks to AWS (no --endpoint / AWS_ENDPOINT_URL): configure credentials and a region, and check that stack {stack_name:?} is deployed (--stack-name)"
            ),
        };
        outbox_local::Error::invalid(format!("{e}\n  hint: {hint}"))
    })?;
    Ok((sdk, stack))
}
