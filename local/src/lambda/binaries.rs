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
//! * Before building, every `Binary` is checked against the bin targets `cargo metadata` lists,
//!   so a name cargo does not know is an error naming the function, not cargo's bare
//!   `no bin target named …`.
//! * Prebuilt binaries (`--no-build`) need no Cargo project: the target directory is the one
//!   given (`--target-dir`), else `CARGO_TARGET_DIR`, else `cargo metadata`'s.
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
    /// A function names a `Binary` that no package of the Cargo project has.
    #[error(
        "{function}: its Binary {binary:?} (Metadata.BuildProperties.Binary) is not a bin target of the Cargo project at {dir}; bin targets there: {known}"
    )]
    UnknownBinary {
        /// The function's logical id.
        function: String,
        /// Its `Binary`.
        binary: String,
        /// The directory cargo ran in.
        dir: PathBuf,
        /// The bin targets cargo knows, comma-separated.
        known: String,
    },
    /// Prebuilt binaries were asked for, but where they are is unknown.
    #[error(
        "--no-build: no target directory for the prebuilt binaries: {reason}; pass --target-dir DIR (the cargo target directory holding debug/<Binary>) or set CARGO_TARGET_DIR"
    )]
    NoTargetDir {
        /// Why `cargo metadata` did not say.
        reason: String,
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

/// What `cargo metadata --no-deps` says about the Cargo project of a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// `target_directory`.
    pub target_dir: PathBuf,
    /// The bin targets of the workspace's packages.
    pub bins: BTreeSet<String>,
}

/// `cargo metadata --format-version 1 --no-deps`, run in `dir`.
///
/// # Errors
/// [`BinariesError`] when cargo cannot be run or answers without a target directory.
pub fn metadata(dir: &Path) -> Result<Metadata, BinariesError> {
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
        return Err(BinariesError::Cargo {
            program,
            args: args.join(" "),
            dir: dir.to_owned(),
            reason: format!(
                "exited with {} (the functions are built in the template's Cargo project; for prebuilt binaries pass --no-build --target-dir DIR)",
                output.status
            ),
        });
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).map_err(|e| BinariesError::Metadata { dir: dir.to_owned(), reason: e.to_string() })?;
    let target_dir = metadata
        .get("target_directory")
        .and_then(serde_json::Value::as_str)
        .map(PathBuf::from)
        .ok_or_else(|| BinariesError::Metadata { dir: dir.to_owned(), reason: "no target_directory".into() })?;
    let bins = metadata
        .get("packages")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("targets")?.as_array())
        .flatten()
        .filter(|t| t.get("kind").and_then(serde_json::Value::as_array).is_some_and(|k| k.iter().any(|k| k == "bin")))
        .filter_map(|t| t.get("name")?.as_str().map(str::to_owned))
        .collect();
    Ok(Metadata { target_dir, bins })
}

/// The cargo target directory for `dir` (`target_directory` of `cargo metadata`).
///
/// # Errors
/// [`BinariesError`] when cargo cannot be run or answers without a target directory.
pub fn target_dir(dir: &Path) -> Result<PathBuf, BinariesError> {
    Ok(metadata(dir)?.target_dir)
}

/// Checks that every `(function, Binary)` names a bin target cargo knows.
///
/// # Errors
/// [`BinariesError::UnknownBinary`] for the first that does not.
pub fn check_known(dir: &Path, functions: &[(String, String)], known: &BTreeSet<String>) -> Result<(), BinariesError> {
    match functions.iter().find(|(_, binary)| !known.contains(binary)) {
        None => Ok(()),
        Some((function, binary)) => Err(BinariesError::UnknownBinary {
            function: function.clone(),
            binary: binary.clone(),
            dir: dir.to_owned(),
            known: known.iter().map(String::as_str).collect::<Vec<_>>().join(", "),
        }),
    }
}

/// Builds `binaries` with one `cargo build --bin …` in `dir` (stderr shows cargo's progress),
/// into `target_dir` when given.
///
/// # Errors
/// [`BinariesError`] when cargo cannot be run or the build fails.
pub fn build<'a>(dir: &Path, binaries: impl IntoIterator<Item = &'a str>, target_dir: Option<&Path>) -> Result<(), BinariesError> {
    let names: BTreeSet<&str> = binaries.into_iter().collect();
    if names.is_empty() {
        return Ok(());
    }
    let program = cargo();
    let mut args = vec!["build".to_owned()];
    if let Some(t) = target_dir {
        args.extend(["--target-dir".to_owned(), t.display().to_string()]);
    }
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

/// Where the functions' binaries come from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Source {
    /// Do not build; use what is there (`--no-build`).
    pub prebuilt: bool,
    /// The cargo target directory (`--target-dir`), absolute; when building, cargo builds into it.
    pub target_dir: Option<PathBuf>,
}

/// The directory of the `dev` profile's binaries for `dir`, after building `binaries` there
/// unless `skip_build` ([`prepare_functions`] with each binary as its own function name).
///
/// # Errors
/// [`BinariesError`].
pub fn prepare<'a>(dir: &Path, binaries: impl IntoIterator<Item = &'a str>, skip_build: bool) -> Result<PathBuf, BinariesError> {
    let functions: Vec<(String, String)> = binaries.into_iter().map(|b| (b.to_owned(), b.to_owned())).collect();
    prepare_functions(dir, &functions, &Source { prebuilt: skip_build, target_dir: None })
}

/// The directory of the `dev` profile's binaries of `functions` (`(logical id, Binary)`) for the
/// template's directory `dir`, after building them there unless [`Source::prebuilt`].
///
/// With `prebuilt`, the target directory is [`Source::target_dir`], else `CARGO_TARGET_DIR`
/// (relative to `dir`, as for the cargo run there), else `cargo metadata`'s — so a template
/// outside any Cargo project runs with either of the first two.
///
/// # Errors
/// [`BinariesError`]; [`BinariesError::UnknownBinary`] naming the function whose `Binary` cargo
/// does not know, before anything is built.
pub fn prepare_functions(dir: &Path, functions: &[(String, String)], source: &Source) -> Result<PathBuf, BinariesError> {
    let env_target = std::env::var_os("CARGO_TARGET_DIR").filter(|t| !t.is_empty()).map(|t| dir.join(t));
    let target = if source.prebuilt {
        match source.target_dir.clone().or(env_target) {
            Some(t) => t,
            None => metadata(dir).map_err(|e| BinariesError::NoTargetDir { reason: e.to_string() })?.target_dir,
        }
    } else {
        let metadata = metadata(dir)?;
        check_known(dir, functions, &metadata.bins)?;
        build(dir, functions.iter().map(|(_, b)| b.as_str()), source.target_dir.as_deref())?;
        source.target_dir.clone().unwrap_or(metadata.target_dir)
    };
    Ok(target.join("debug"))
}

impl From<BinariesError> for crate::Error {
    fn from(e: BinariesError) -> Self {
        Self::Part(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    #[test]
    fn a_binary_cargo_does_not_know_is_an_error_naming_the_function_before_any_build() {
        let functions = [("EchoFunction".to_owned(), "echo-function".to_owned()), ("ShipFunction".to_owned(), "no-such-binary".to_owned())];
        let err = prepare_functions(&root(), &functions, &Source::default()).expect_err("no-such-binary is not a bin target").to_string();
        assert!(err.starts_with("ShipFunction: its Binary \"no-such-binary\" (Metadata.BuildProperties.Binary) is not a bin target"), "{err}");
        assert!(err.contains("echo-function"), "the known bin targets are listed: {err}");
    }

    #[test]
    fn prebuilt_binaries_need_no_cargo_project_when_the_target_dir_is_given() {
        let outside = std::env::temp_dir().join(format!("outbox-local-no-project-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&outside).expect("a temporary directory");
        let functions = [("EchoFunction".to_owned(), "echo-function".to_owned())];
        let given = Source { prebuilt: true, target_dir: Some(outside.join("t")) };
        assert_eq!(prepare_functions(&outside, &functions, &given).expect("no cargo needed"), outside.join("t/debug"));
        let _ = std::fs::remove_dir_all(&outside);
    }

    #[test]
    fn known_binaries_pass_the_check() {
        let known: BTreeSet<String> = ["a".to_owned(), "b".to_owned()].into();
        assert!(check_known(Path::new("."), &[("F".into(), "a".into())], &known).is_ok());
        assert!(matches!(check_known(Path::new("."), &[("F".into(), "c".into())], &known), Err(BinariesError::UnknownBinary { .. })));
    }
}
