//! Starting the moto AWS emulator in server mode on a free loopback port.
//!
//! moto comes from the project's own virtualenv (`.venv-emulator`, pinned in
//! `requirements/emulator.txt`), created by `scripts/venv emulator` the first time it is needed,
//! and runs through `scripts/moto_server.py`, which serialises DynamoDB requests, undoes a
//! cancelled transaction key by key (moto copies every table it touches on each transaction) and
//! lets moto free the model objects it no longer uses (the script says why).
//! `OUTBOX_MOTO_SERVER` names another executable taking `-H HOST -p PORT`.
//!
//! The endpoint handed out ([`Emulator::endpoint`]) is the runtime's own: it answers the Custom
//! Event Bus's operations itself ([`crate::custom_bus`], which moto does not have) and forwards
//! every other request to moto ([`Emulator::moto_endpoint`]) unchanged.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

/// Why the emulator did not start.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    /// The virtualenv could not be created.
    #[error("could not install moto with {script}: {reason}")]
    Install {
        /// The script run.
        script: PathBuf,
        /// Why.
        reason: String,
    },
    /// The server did not start or answer.
    #[error("moto_server did not start: {0}")]
    Start(String),
}

/// A running moto server behind the runtime's endpoint; stopped when dropped.
#[derive(Debug)]
pub struct Emulator {
    child: Child,
    /// `http://127.0.0.1:PORT`: the endpoint every SDK client is given (Custom Event Bus
    /// operations answered by [`Emulator::custom_bus`], the rest forwarded to moto).
    pub endpoint: String,
    /// `http://127.0.0.1:PORT` of moto itself.
    pub moto_endpoint: String,
    /// The Custom Event Bus played at [`Emulator::endpoint`].
    pub custom_bus: std::sync::Arc<crate::custom_bus::CustomBus>,
    _front: crate::custom_bus::front::Served,
}

impl Emulator {
    /// Records each `PutEvents` entry the endpoint's buses accept in `journal` (the runtime's
    /// timeline journal, [`crate::journal`]).
    pub fn set_journal(&self, journal: std::sync::Arc<crate::journal::Journal>) {
        self._front.set_journal(journal);
    }

    /// The server's process id (`None` once it has exited).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Starts `moto_server` on a free port of 127.0.0.1 and waits until it answers (about a
    /// second). `root` is the project root (where `scripts/venv` lives).
    ///
    /// # Errors
    /// [`EmulatorError`].
    pub async fn start(root: &Path) -> Result<Self, EmulatorError> {
        let (program, args) = moto_server(root).await?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| EmulatorError::Start(format!("no free port: {e}")))?
            .port();
        let mut command = Command::new(&program);
        command
            .args(&args)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        // Stopped with us even when we are killed (SIGTERM, SIGKILL) and never drop the handle.
        #[cfg(target_os = "linux")]
        #[allow(unsafe_code)]
        // SAFETY: prctl is async-signal-safe and only sets a flag of the child being spawned.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().map_err(|e| EmulatorError::Start(format!("{}: {e}", program.display())))?;
        let mut child = child;
        let moto_endpoint = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                let region = outbox_cli::aws::region_from_env();
                let front = crate::custom_bus::front::serve(&moto_endpoint, &region, outbox_cli::aws::EMULATOR_ACCOUNT)
                    .await
                    .map_err(|e| EmulatorError::Start(format!("the runtime's endpoint: {e}")))?;
                return Ok(Self { child, endpoint: front.endpoint.clone(), moto_endpoint, custom_bus: front.bus.clone(), _front: front });
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(EmulatorError::Start(format!("{} exited with {status}", program.display())));
            }
            if started.elapsed() > Duration::from_secs(30) {
                return Err(EmulatorError::Start(format!("no answer on port {port} after 30 s")));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The program to run and its first arguments.
async fn moto_server(root: &Path) -> Result<(PathBuf, Vec<PathBuf>), EmulatorError> {
    if let Some(path) = std::env::var_os("OUTBOX_MOTO_SERVER") {
        return Ok((PathBuf::from(path), Vec::new()));
    }
    let script = root.join("scripts/venv");
    let output = Command::new("bash")
        .arg(&script)
        .arg("emulator")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .await
        .map_err(|e| EmulatorError::Install { script: script.clone(), reason: e.to_string() })?;
    if !output.status.success() {
        return Err(EmulatorError::Install { script, reason: format!("exited with {}", output.status) });
    }
    let bin = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    Ok((PathBuf::from(bin).join("python"), vec![root.join("scripts/moto_server.py")]))
}

impl From<EmulatorError> for crate::Error {
    fn from(e: EmulatorError) -> Self {
        Self::Part(Box::new(e))
    }
}
