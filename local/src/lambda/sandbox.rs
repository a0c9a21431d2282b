//! One instance of a function — Lambda's *execution environment*: the function's real binary
//! run as a child process with the environment Lambda would give it, talking to a
//! [`RuntimeApi`] of its own on a loopback port.
//!
//! * Environment: only what [`Launch::env`] says (the caller builds it; nothing of this process's
//!   environment leaks in) plus `AWS_LAMBDA_RUNTIME_API=127.0.0.1:PORT`.
//! * Output: stdout and stderr are read line by line. CloudWatch Embedded Metric Format lines
//!   ([`crate::lambda::emf`]) are added to [`Stats`] under the function's logical id; other lines go to
//!   stderr prefixed `[LogicalId]` when [`Launch::verbose`], and the last
//!   [`TAIL_LINES`] are kept to show when the instance dies.
//! * Lifetime: killed when the [`Sandbox`] is dropped, when its invocation times out, and — through
//!   `PR_SET_PDEATHSIG` on Linux — when this process dies, so no instance is orphaned.
//!
//! Failures as Lambda reports them: an invocation that outlives the function's `Timeout` kills
//! the instance and fails with `Sandbox.Timedout`; an instance that exits mid-invocation fails it
//! with `Runtime.ExitError`; an init error (reported through `/init/error`, or the process
//! exiting before it asked for an event) fails the invocation with an error naming the function
//! and the init error. Source: <https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html>.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Command;
use tokio::sync::watch;

use crate::lambda::runtime_api::{FunctionError, Outcome, RuntimeApi};
use crate::stats::Stats;

/// Lines of an instance's output kept to show when it dies.
pub const TAIL_LINES: usize = 20;

/// Longest wait for a new instance to ask for its first event (Lambda's init phase limit for
/// on-demand functions is 10 s).
pub const INIT_TIMEOUT: Duration = Duration::from_secs(10);

/// How to start instances of one function.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The function's logical id (log prefix, [`Stats`] key, error messages).
    pub logical_id: String,
    /// The function's ARN (`Lambda-Runtime-Invoked-Function-Arn`).
    pub arn: String,
    /// The executable.
    pub program: PathBuf,
    /// Its arguments (none for a Lambda `bootstrap`).
    pub args: Vec<OsString>,
    /// The whole environment of the process, except `AWS_LAMBDA_RUNTIME_API`.
    pub env: Vec<(String, String)>,
    /// Print the instance's log lines on stderr.
    pub verbose: bool,
    /// Where EMF metrics go.
    pub stats: Arc<Stats>,
    /// Fault injection: the instance's AWS calls go through its own proxy of this injector
    /// (its `AWS_ENDPOINT_URL`), which may kill it ([`crate::faults`]).
    pub faults: Option<Arc<crate::faults::Injector>>,
}

struct Watch {
    dead: AtomicBool,
    killing: AtomicBool,
    tail: Mutex<VecDeque<String>>,
}

impl Watch {
    fn tail(&self) -> Vec<String> {
        self.tail.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }
}

/// A running instance; killed when dropped.
pub struct Sandbox {
    logical_id: String,
    api: Arc<RuntimeApi>,
    watch: Arc<Watch>,
    kill: watch::Sender<bool>,
    _faults: Option<crate::faults::Attached>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox").field("function", &self.logical_id).field("api", &self.api.addr).finish_non_exhaustive()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.watch.killing.store(true, Ordering::SeqCst);
        let _ = self.kill.send(true);
    }
}

/// [`crate::Error::Function`] of `launch`'s function: what could not be done, and why.
fn function_error(launch: &Launch, reason: &str, source: impl Into<crate::error::Source>) -> crate::Error {
    crate::Error::Function { function: launch.logical_id.clone(), reason: reason.to_owned(), source: source.into() }
}

impl Sandbox {
    /// Starts an instance: its Runtime API, then the process.
    ///
    /// # Errors
    /// A message naming the function and the program when the port cannot be bound or the
    /// program cannot be started.
    pub async fn start(launch: &Launch) -> crate::Result<Self> {
        let api = Arc::new(RuntimeApi::bind(&launch.arn).await.map_err(|e| function_error(launch, "no port for the Runtime API", e))?);
        let (kill, mut killed) = watch::channel(false);
        let faults = match &launch.faults {
            Some(injector) => {
                // A crash: the process is killed as if it died (not `killing`: the invocation fails
                // with Runtime.ExitError).
                let crash = kill.clone();
                let proxy = injector
                    .attach(
                        &launch.logical_id,
                        Box::new(move || {
                            let _ = crash.send(true);
                        }),
                    )
                    .await;
                Some(proxy.map_err(|e| function_error(launch, "no port for the fault proxy", e))?)
            }
            None => None,
        };
        let mut command = Command::new(&launch.program);
        command
            .args(&launch.args)
            .env_clear()
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .envs(faults.as_ref().map(|f| ("AWS_ENDPOINT_URL", f.endpoint.clone())))
            .env("AWS_LAMBDA_RUNTIME_API", api.addr.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(dir) = launch.program.parent() {
            command.current_dir(dir);
        }
        // Stopped with us even when we are killed (SIGTERM, SIGKILL) and never drop the handle.
        #[cfg(target_os = "linux")]
        #[allow(unsafe_code)]
        // SAFETY: prctl is async-signal-safe and only sets a flag of the child being spawned.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(|e| function_error(launch, &format!("cannot start {}", launch.program.display()), e))?;
        let watch = Arc::new(Watch { dead: AtomicBool::new(false), killing: AtomicBool::new(false), tail: Mutex::new(VecDeque::new()) });
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(tokio::spawn(read_lines(out, launch.clone(), watch.clone())));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(tokio::spawn(read_lines(err, launch.clone(), watch.clone())));
        }
        let (logical_id, program) = (launch.logical_id.clone(), launch.program.display().to_string());
        let (api_of_watcher, watch_of_watcher) = (api.clone(), watch.clone());
        tokio::spawn(async move {
            let (api, watch) = (api_of_watcher, watch_of_watcher);
            let status = tokio::select! {
                status = child.wait() => status,
                _ = killed.changed() => {
                    let _ = child.start_kill();
                    child.wait().await
                }
            };
            watch.dead.store(true, Ordering::SeqCst);
            // The last lines are read once the pipes close (bounded: a grandchild may hold them).
            for reader in readers {
                let _ = tokio::time::timeout(Duration::from_millis(500), reader).await;
            }
            if watch.killing.load(Ordering::SeqCst) {
                return;
            }
            let status = status.map(|s| s.to_string()).unwrap_or_else(|e| format!("unknown status ({e})"));
            let tail = watch.tail();
            let error = if api.polled() {
                FunctionError::new("Runtime.ExitError", format!("Error: Runtime exited with error: {status} ({logical_id}, {program})"))
            } else {
                let last = last_words(&tail).map(|l| format!(": {l}")).unwrap_or_default();
                FunctionError::new(
                    "Runtime.ExitError",
                    format!("{logical_id} failed to initialise: {program} exited with {status} before asking for an event{last}"),
                )
            };
            let failed_an_invocation = api.fail_current(error);
            if failed_an_invocation || api.init_error().is_none() {
                let shown =
                    if tail.is_empty() { "  (no output)".to_owned() } else { tail.iter().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n") };
                eprintln!("[{logical_id}] instance exited with {status}; its last output:\n{shown}");
            }
        });
        Ok(Self { logical_id: launch.logical_id.clone(), api, watch, kill, _faults: faults })
    }

    /// Whether the instance can take another invocation (its process runs, its init did not fail).
    pub fn is_alive(&self) -> bool {
        !self.watch.dead.load(Ordering::SeqCst) && self.api.init_error().is_none()
    }

    /// Runs one invocation: `payload` (the event, JSON text) within `timeout` from the moment the
    /// instance fetches it. On timeout the instance is killed.
    pub async fn invoke(&self, payload: String, timeout: Duration) -> Outcome {
        let pending = match self.api.begin(payload, timeout) {
            Ok(p) => p,
            Err(init) => return Err(self.init_failure(init)),
        };
        let mut outcome = pending.outcome;
        let settle = |r: Result<Outcome, tokio::sync::oneshot::error::RecvError>| match r {
            Ok(Err(e)) if self.api.init_error().as_ref() == Some(&e) => Err(self.init_failure(e)),
            Ok(outcome) => outcome,
            Err(_) => Err(FunctionError::new("Runtime.ExitError", format!("{}: the instance stopped during the invocation", self.logical_id))),
        };
        tokio::select! {
            r = &mut outcome => return settle(r),
            _ = pending.fetched => {}
            _ = tokio::time::sleep(INIT_TIMEOUT) => {
                self.stop(&pending.request_id);
                return Err(FunctionError::new(
                    "Sandbox.Timedout",
                    format!("{}: the instance did not ask for an event within {} s of starting (init phase)", self.logical_id, INIT_TIMEOUT.as_secs()),
                ));
            }
        }
        match tokio::time::timeout(timeout, &mut outcome).await {
            Ok(r) => settle(r),
            Err(_) => {
                self.stop(&pending.request_id);
                let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
                Err(FunctionError::new(
                    "Sandbox.Timedout",
                    format!("{now} {} Task timed out after {:.2} seconds", pending.request_id, timeout.as_secs_f64()),
                ))
            }
        }
    }

    /// Abandons invocation `request_id` and kills the instance.
    fn stop(&self, request_id: &str) {
        self.api.abandon(request_id);
        self.watch.killing.store(true, Ordering::SeqCst);
        self.watch.dead.store(true, Ordering::SeqCst);
        let _ = self.kill.send(true);
    }

    fn init_failure(&self, init: FunctionError) -> FunctionError {
        FunctionError::new(init.error_type, format!("{} failed to initialise: {}", self.logical_id, init.error_message))
    }
}

/// What an instance's last output lines say about why it died: a Rust panic's
/// `thread '…' panicked at <file>:<line>:<col>:` line joined with the line after it (the panic's
/// message), else the last line with text that is not a `note:` (e.g. `note: run with
/// RUST_BACKTRACE=1 …`).
pub fn last_words(tail: &[String]) -> Option<String> {
    let said = |l: &&String| !l.trim().is_empty() && !l.trim_start().starts_with("note:");
    if let Some(at) = tail.iter().rposition(|l| l.contains("panicked at")) {
        let panic = tail[at].trim();
        let message = tail[at + 1..].iter().find(said).map(|l| l.trim());
        return Some(match message {
            // Before Rust 1.73 the message was on the same line (`panicked at 'msg', file:l:c`).
            Some(m) if panic.ends_with(':') => format!("{panic} {m}"),
            _ => panic.to_owned(),
        });
    }
    tail.iter().rev().find(said).map(|l| l.trim().to_owned())
}

/// Reads `pipe` line by line until it closes: EMF documents to the stats, the rest to the tail
/// (and to stderr when verbose).
async fn read_lines(pipe: impl AsyncRead + Unpin, launch: Launch, watch: Arc<Watch>) {
    let mut reader = BufReader::new(pipe);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end_matches(['\n', '\r']);
        if let Some(values) = crate::lambda::emf::parse(line) {
            launch.stats.add_metrics(&launch.logical_id, &values);
            continue;
        }
        launch.stats.add_log_line(&launch.logical_id, line);
        if launch.verbose {
            eprintln!("[{}] {line}", launch.logical_id);
        }
        let mut tail = watch.tail.lock().unwrap_or_else(|p| p.into_inner());
        if tail.len() == TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A "runtime" in bash: fetches one event through `/dev/tcp`, then runs `then`.
    fn launch(then: &str) -> Launch {
        let script = format!(
            r#"host=${{AWS_LAMBDA_RUNTIME_API%:*}}; port=${{AWS_LAMBDA_RUNTIME_API#*:}}
exec 3<>/dev/tcp/$host/$port
printf 'GET /2018-06-01/runtime/invocation/next HTTP/1.1\r\nHost: %s\r\n\r\n' "$AWS_LAMBDA_RUNTIME_API" >&3
read -r status <&3
echo "got the event: $status"
{then}"#
        );
        Launch {
            logical_id: "ScriptFunction".into(),
            arn: "arn:aws:lambda:us-east-1:123456789012:function:s-ScriptFunction".into(),
            program: PathBuf::from("/bin/bash"),
            args: vec!["-c".into(), script.into()],
            env: vec![("PATH".into(), std::env::var("PATH").unwrap_or_default())],
            verbose: false,
            stats: Arc::new(Stats::default()),
            faults: None,
        }
    }

    #[tokio::test]
    async fn an_instance_that_exits_mid_invocation_gives_runtime_exit_error() {
        let sandbox = Sandbox::start(&launch("echo 'panicked at src/main.rs' >&2; exit 3")).await.expect("the instance starts");
        let error = sandbox.invoke("{}".into(), Duration::from_secs(10)).await.expect_err("the instance crashed");
        assert_eq!(error.error_type, "Runtime.ExitError", "{error:?}");
        assert!(error.error_message.contains("exit status: 3"), "{error:?}");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while sandbox.is_alive() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!sandbox.is_alive(), "a crashed instance is not reused");
        let tail = sandbox.watch.tail();
        assert!(tail.iter().any(|l| l.contains("panicked at src/main.rs")), "its last output is kept: {tail:?}");
    }

    #[tokio::test]
    async fn an_instance_that_exits_during_init_names_the_function_and_its_last_words() {
        let mut l = launch("");
        l.args = vec!["-c".into(), "echo 'Error: EVENT_BUS_NAME is required' >&2; exit 1".into()];
        let sandbox = Sandbox::start(&l).await.expect("the instance starts");
        let error = sandbox.invoke("{}".into(), Duration::from_secs(10)).await.expect_err("the init failed");
        assert_eq!(error.error_type, "Runtime.ExitError", "{error:?}");
        assert!(error.error_message.starts_with("ScriptFunction failed to initialise"), "{error:?}");
        assert!(error.error_message.contains("EVENT_BUS_NAME is required"), "{error:?}");
    }

    #[tokio::test]
    async fn an_init_panic_reports_the_panic_message_not_the_backtrace_note() {
        let mut l = launch("");
        let panic = "echo \"thread 'main' panicked at src/main.rs:7:43:\" >&2; echo 'EVENT_BUS_NAME is required: NotPresent' >&2; \
                     echo 'note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace' >&2; exit 101";
        l.args = vec!["-c".into(), panic.into()];
        let sandbox = Sandbox::start(&l).await.expect("the instance starts");
        let error = sandbox.invoke("{}".into(), Duration::from_secs(10)).await.expect_err("the init panicked");
        assert!(
            error
                .error_message
                .ends_with("before asking for an event: thread 'main' panicked at src/main.rs:7:43: EVENT_BUS_NAME is required: NotPresent"),
            "{error:?}"
        );
    }

    #[test]
    fn last_words_skip_notes_and_blank_lines() {
        let lines = |ls: &[&str]| ls.iter().map(|l| (*l).to_owned()).collect::<Vec<_>>();
        assert_eq!(last_words(&lines(&["starting", "Error: no table", "", "note: something"])).as_deref(), Some("Error: no table"));
        assert_eq!(
            last_words(&lines(&["thread 'main' panicked at 'boom', src/main.rs:1:1", "note: run with RUST_BACKTRACE=1"])).as_deref(),
            Some("thread 'main' panicked at 'boom', src/main.rs:1:1")
        );
        assert_eq!(last_words(&lines(&["", "note: only a note"])), None);
    }

    #[tokio::test]
    async fn an_invocation_over_the_timeout_kills_the_instance() {
        let sandbox = Sandbox::start(&launch("sleep 30")).await.expect("the instance starts");
        let started = std::time::Instant::now();
        let error = sandbox.invoke("{}".into(), Duration::from_millis(300)).await.expect_err("timed out");
        assert_eq!(error.error_type, "Sandbox.Timedout", "{error:?}");
        assert!(error.error_message.contains("Task timed out after 0.30 seconds"), "{error:?}");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        assert!(!sandbox.is_alive(), "a timed-out instance is not reused");
    }

    #[tokio::test]
    async fn emf_lines_become_metrics_of_the_function() {
        let l = launch(r#"echo '{"_aws":{"CloudWatchMetrics":[{"Metrics":[{"Name":"EventsPublished"}]}]},"EventsPublished":5}'; exit 0"#);
        let stats = l.stats.clone();
        let sandbox = Sandbox::start(&l).await.expect("the instance starts");
        let _ = sandbox.invoke("{}".into(), Duration::from_secs(10)).await;
        assert_eq!(stats.snapshot().metric("ScriptFunction", "EventsPublished"), 5.0);
    }
}
