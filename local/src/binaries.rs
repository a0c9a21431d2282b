//! The functions' binaries: built with cargo, as `sam build` (BuildMethod `rust-cargolambda`)
//! would build `Metadata.BuildProperties.Binary`, but for this machine and in the `dev` profile.
//!
//! * The target directory is the one cargo uses for the template's directory, asked from
//!   `cargo metadata --format-version 1 --no-deps` run there: a `CARGO_TARGET_DIR`, a
//!   `.cargo/config.toml` `build.target-dir` and a template outside this repository all work.
//! * All binaries are built with ONE `cargo build --bin a --bin b …` in the template's directory
//!   (cargo's progress on stderr), so cargo resolves the packages and features there — the
//!   workspace's default members at a workspace root, the package of the directory elsewhere.
//! * The binary of a function is `<target dir>/debug/<Binary>`.
//!
//! The program is `$CARGO` (set by cargo for the processes it runs) or `cargo` on `PATH`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Why the binaries are not there.
#[derive(Debug, thiserror::Error)]
pub enum BinariesError {
    /// cargo could not be run.
    #[error("cannot run `{program} {args}` in {dir}: {reason}")]
    Cargo {
        /// The program.
        program: String,
        /// Its arguments.
        args: String,
        /// The directory it ran in.
        dir: PathBuf,
        /// Why.
        reason: String,
    },
    /// `cargo build` failed (its errors are on stderr).
    #[error("`cargo build {args}` failed in {dir} ({status}); cargo's errors are above")]
    Build {
        /// Its arguments.
        args: String,
        /// The directory it ran in.
        dir: PathBuf,
        /// Its exit status.
        status: String,
    },
    /// `cargo metadata` answered something unexpected.
    #[error("`cargo metadata` in {dir} did not name a target directory: {reason}")]
    Metadata {
        /// The directory it ran in.
        dir: PathBuf,
        /// Why.
        reason: String,
    },
}

fn cargo() -> String {
    std::env::var("CARGO").ok().filter(|c| !c.is_empty()).unwrap_or_else(|| "cargo".into())
}

/// The cargo target directory for `dir` (`target_directory` of `cargo metadata`).
///
/// # Errors
/// [`BinariesError`] when cargo cannot be run or answers without a target directory.
pub fn target_dir(dir: &Path) -> Result<PathBuf, BinariesError> {
    let program = cargo();
    let args = ["metadata", "--format-version", "1", "--no-deps"];
    let output = Command::new(&program)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| BinariesError::Cargo { program: program.clone(), args: args.join(" "), dir: dir.to_owned(), reason: e.to_string() })?;
    if !output.status.success() {
        return Err(BinariesError::Cargo { program, args: args.join(" "), dir: dir.to_owned(), reason: format!("exited with {}", output.status) });
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).map_err(|e| BinariesError::Metadata { dir: dir.to_owned(), reason: e.to_string() })?;
    metadata
        .get("target_directory")
        .and_then(serde_json::Value::as_str)
        .map(PathBuf::from)
        .ok_or_else(|| BinariesError::Metadata { dir: dir.to_owned(), reason: "no target_directory".into() })
}

/// Builds `binaries` with one `cargo build --bin …` in `dir` (stderr shows cargo's progress).
///
/// # Errors
/// [`BinariesError`] when cargo cannot be run or the build fails.
pub fn build<'a>(dir: &Path, binaries: impl IntoIterator<Item = &'a str>) -> Result<(), BinariesError> {
    let names: BTreeSet<&str> = binaries.into_iter().collect();
    if names.is_empty() {
        return Ok(());
    }
    let program = cargo();
    let mut args = vec!["build".to_owned()];
    for name in &names {
        args.extend(["--bin".to_owned(), (*name).to_owned()]);
    }
    let status = Command::new(&program)
        .args(&args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| BinariesError::Cargo { program: program.clone(), args: args.join(" "), dir: dir.to_owned(), reason: e.to_string() })?;
    if !status.success() {
        return Err(BinariesError::Build { args: args[1..].join(" "), dir: dir.to_owned(), status: status.to_string() });
    }
    Ok(())
}

/// The directory of the `dev` profile's binaries for `dir`, after building `binaries` there
/// unless `skip_build`.
///
/// # Errors
/// [`BinariesError`].
pub fn prepare<'a>(dir: &Path, binaries: impl IntoIterator<Item = &'a str>, skip_build: bool) -> Result<PathBuf, BinariesError> {
    if !skip_build {
        build(dir, binaries)?;
    }
    Ok(target_dir(dir)?.join("debug"))
}
