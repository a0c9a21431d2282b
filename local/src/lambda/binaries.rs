//! The functions' binaries: built with cargo as `sam build` (BuildMethod `rust-cargolambda`)
//! builds `Metadata.BuildProperties.Binary` in each function's `CodeUri`, but for this machine and
//! in the `dev` profile.
//!
//! * Each function is built from its own `CodeUri` ([`FunctionSpec::code_uri`]: relative to the
//!   template that declares it, a nested block's template included). The functions are grouped
//!   by the Cargo workspace their `CodeUri` belongs to (`cargo locate-project --workspace` run
//!   there), and each workspace is built with ONE `cargo build --workspace --bin a --bin b …` in
//!   its root (cargo's progress on stderr): the features resolve as `cargo build --workspace
//!   --bins` resolves them, so after that build this one is a no-op.
//! * The binary of a function is `<its workspace's target dir>/debug/<Binary>`, the target
//!   directory asked from `cargo metadata --format-version 1 --no-deps` in that root: a
//!   `CARGO_TARGET_DIR` (which applies to every workspace, as for cargo), a `.cargo/config.toml`
//!   `build.target-dir` and a template outside this repository all work; `--target-dir` builds
//!   every workspace into the one directory given.
//! * Before anything is built, every function is checked: a `CodeUri` that is not a local
//!   directory or has no Cargo project, and a `Binary` that is not a bin target of the packages
//!   cargo builds there (the workspace's default members at a workspace root, else the package
//!   of the directory: what `cargo lambda build --bin <Binary>` finds in `CodeUri`), are errors
//!   naming the function, not cargo's bare `no bin target named …`.
//! * Prebuilt binaries (`--no-build`) are taken from the target directory given (`--target-dir`),
//!   else an absolute `CARGO_TARGET_DIR`, else each workspace's (`cargo metadata`), so a template
//!   outside any Cargo project runs with either of the first two.
//!
//! The program is `$CARGO` (set by cargo for the processes it runs) or `cargo` on `PATH`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use outbox_template::FunctionSpec;

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
    /// A function names a `Binary` that the packages cargo builds in its `CodeUri` do not have.
    #[error(
        "{function}: its Binary {binary:?} (Metadata.BuildProperties.Binary) is not a bin target of the Cargo project at {dir}; bin targets there: {known}"
    )]
    UnknownBinary {
        /// The function's logical id.
        function: String,
        /// Its `Binary`.
        binary: String,
        /// The function's `CodeUri` directory.
        dir: PathBuf,
        /// The bin targets cargo knows there, comma-separated.
        known: String,
    },
    /// A function's `CodeUri` is not a local directory holding (or inside) a Cargo project.
    #[error(
        "{function}: its CodeUri {code_uri} {reason}; `sam build` (BuildMethod rust-cargolambda) runs `cargo lambda build --bin {binary}` there: point CodeUri at the directory of the Cargo package (or workspace) with that bin"
    )]
    NoCargoProject {
        /// The function's logical id.
        function: String,
        /// Its `Binary`.
        binary: String,
        /// Its `CodeUri`, as resolved (or as written when it is not a local path).
        code_uri: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Prebuilt binaries were asked for, but where they are is unknown.
    #[error(
        "--no-build: no target directory for the prebuilt binaries: {reason}; pass --target-dir DIR (the cargo target directory holding debug/<Binary>) or set CARGO_TARGET_DIR to an absolute path"
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
    /// `workspace_root`.
    pub workspace_root: PathBuf,
    /// Each package's bin targets, by its manifest's path (canonical).
    pub package_bins: BTreeMap<PathBuf, BTreeSet<String>>,
    /// The manifests (canonical) of the workspace's default members (`workspace_default_members`:
    /// what `cargo build` builds at the workspace root).
    pub default_members: BTreeSet<PathBuf>,
}

impl Metadata {
    /// The bin targets of the packages `cargo build` builds in a directory whose nearest manifest
    /// is `manifest`: the default members when it is the workspace root's, else that package's.
    pub fn bins_at(&self, manifest: &Path) -> BTreeSet<String> {
        let manifest = canonical(manifest);
        if let Some(bins) = self.package_bins.get(&manifest) {
            if manifest != canonical(&self.workspace_root.join("Cargo.toml")) {
                return bins.clone();
            }
        }
        self.package_bins.iter().filter(|(m, _)| self.default_members.contains(*m)).flat_map(|(_, b)| b.iter().cloned()).collect()
    }
}

/// `path` canonical when it exists (symbolic links and `..` resolved), else as given.
fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_owned())
}

/// `cargo metadata --format-version 1 --no-deps`, run in `dir`.
///
/// # Errors
/// [`BinariesError`] when cargo cannot be run or answers without a target directory.
pub fn metadata(dir: &Path) -> Result<Metadata, BinariesError> {
    let stdout = run_cargo(dir, &["metadata", "--format-version", "1", "--no-deps"])?;
    let metadata: serde_json::Value =
        serde_json::from_slice(&stdout).map_err(|e| BinariesError::Metadata { dir: dir.to_owned(), reason: e.to_string() })?;
    let path = |key: &str| {
        metadata
            .get(key)
            .and_then(serde_json::Value::as_str)
            .map(PathBuf::from)
            .ok_or_else(|| BinariesError::Metadata { dir: dir.to_owned(), reason: format!("no {key}") })
    };
    let (target_dir, workspace_root) = (path("target_directory")?, path("workspace_root")?);
    let mut package_bins = BTreeMap::new();
    let mut ids = BTreeMap::new();
    for package in metadata.get("packages").and_then(serde_json::Value::as_array).into_iter().flatten() {
        let Some(manifest) = package.get("manifest_path").and_then(serde_json::Value::as_str).map(|m| canonical(Path::new(m))) else { continue };
        let bins: BTreeSet<String> = package
            .get("targets")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .filter(|t| t.get("kind").and_then(serde_json::Value::as_array).is_some_and(|k| k.iter().any(|k| k == "bin")))
            .filter_map(|t| t.get("name")?.as_str().map(str::to_owned))
            .collect();
        if let Some(id) = package.get("id").and_then(serde_json::Value::as_str) {
            ids.insert(id.to_owned(), manifest.clone());
        }
        package_bins.insert(manifest, bins);
    }
    // `workspace_default_members` (cargo 1.71+); without it, every member, as cargo does for a
    // workspace without `default-members` at a virtual root.
    let default_members = match metadata.get("workspace_default_members").and_then(serde_json::Value::as_array) {
        Some(members) => members.iter().filter_map(|id| ids.get(id.as_str()?).cloned()).collect(),
        None => package_bins.keys().cloned().collect(),
    };
    let bins = package_bins.values().flatten().cloned().collect();
    Ok(Metadata { target_dir, bins, workspace_root, package_bins, default_members })
}

/// Runs `cargo <args>` in `dir` (stderr shown), its stdout.
fn run_cargo(dir: &Path, args: &[&str]) -> Result<Vec<u8>, BinariesError> {
    let program = cargo();
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
                "exited with {} (the functions are built in their CodeUri's Cargo project; for prebuilt binaries pass --no-build --target-dir DIR)",
                output.status
            ),
        });
    }
    Ok(output.stdout)
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

/// Builds `binaries` with one `cargo build --workspace --bin …` in `dir`, a workspace's root
/// (stderr shows cargo's progress), into `target_dir` when given. `--workspace`: the features
/// resolve over every member, as for `cargo build --workspace --bins`, so the two share one build.
///
/// # Errors
/// [`BinariesError`] when cargo cannot be run or the build fails.
pub fn build<'a>(dir: &Path, binaries: impl IntoIterator<Item = &'a str>, target_dir: Option<&Path>) -> Result<(), BinariesError> {
    let names: BTreeSet<&str> = binaries.into_iter().collect();
    if names.is_empty() {
        return Ok(());
    }
    let program = cargo();
    let mut args = vec!["build".to_owned(), "--workspace".to_owned()];
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
    /// The cargo target directory (`--target-dir`), absolute; when building, cargo builds every
    /// workspace into it.
    pub target_dir: Option<PathBuf>,
}

/// Where each function's binary is: the directory holding `<Binary>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BinDirs {
    /// Every function's in one directory (`<target dir>/debug`).
    Shared(PathBuf),
    /// Per function's logical id: `<its workspace's target dir>/debug`.
    PerFunction(BTreeMap<String, PathBuf>),
}

impl BinDirs {
    /// The directory of function `logical_id`'s binary, when known.
    pub fn of(&self, logical_id: &str) -> Option<&Path> {
        match self {
            Self::Shared(dir) => Some(dir),
            Self::PerFunction(dirs) => dirs.get(logical_id).map(PathBuf::as_path),
        }
    }
}

/// The directory of the `dev` profile's binaries for `dir`, after building `binaries` there
/// (one workspace: `dir`'s) unless `skip_build`.
///
/// # Errors
/// [`BinariesError`]; [`BinariesError::UnknownBinary`] (the binary as the function's name) when
/// cargo does not know one, before anything is built.
pub fn prepare<'a>(dir: &Path, binaries: impl IntoIterator<Item = &'a str>, skip_build: bool) -> Result<PathBuf, BinariesError> {
    let functions: Vec<(String, String)> = binaries.into_iter().map(|b| (b.to_owned(), b.to_owned())).collect();
    let metadata = metadata(dir)?;
    if !skip_build {
        check_known(dir, &functions, &metadata.bins)?;
        build(&metadata.workspace_root, functions.iter().map(|(_, b)| b.as_str()), None)?;
    }
    Ok(metadata.target_dir.join("debug"))
}

/// The functions of one Cargo workspace, built together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceBuild {
    /// The workspace's root directory (where `cargo build` runs).
    pub root: PathBuf,
    /// Its target directory (`cargo metadata`'s, in the root).
    pub target_dir: PathBuf,
    /// `(logical id, Binary)` of its functions, in template order.
    pub functions: Vec<(String, String)>,
}

/// The functions grouped by the Cargo workspace of their `CodeUri`, each `Binary` checked against
/// the bin targets cargo builds in that `CodeUri`; workspaces in the order their first function
/// comes. Runs `cargo locate-project --workspace` once per `CodeUri` and `cargo metadata` once per
/// workspace; builds nothing.
///
/// # Errors
/// [`BinariesError::NoCargoProject`] or [`BinariesError::UnknownBinary`] naming the first function
/// in the way; [`BinariesError`] when cargo cannot be run.
pub fn plan(functions: &[FunctionSpec]) -> Result<Vec<WorkspaceBuild>, BinariesError> {
    let mut roots: BTreeMap<PathBuf, PathBuf> = BTreeMap::new(); // CodeUri -> workspace root
    let mut workspaces: Vec<(WorkspaceBuild, Metadata)> = Vec::new();
    for f in functions {
        let no_project = |code_uri: String, reason: String| BinariesError::NoCargoProject {
            function: f.logical_id.clone(),
            binary: f.binary.clone(),
            code_uri,
            reason,
        };
        let Some(code_uri) = &f.code_uri else {
            return Err(no_project(
                "(CodeUri)".into(),
                "is not a local directory (an S3 location): the local runtime builds local sources only".into(),
            ));
        };
        let dir = code_uri.canonicalize().map_err(|e| no_project(code_uri.display().to_string(), format!("is not a directory here ({e})")))?;
        if !dir.is_dir() {
            return Err(no_project(dir.display().to_string(), "is not a directory".into()));
        }
        let Some(manifest) = dir.ancestors().map(|d| d.join("Cargo.toml")).find(|m| m.is_file()) else {
            return Err(no_project(dir.display().to_string(), "has no Cargo.toml, in it or above it".into()));
        };
        let root = match roots.get(&dir) {
            Some(root) => root.clone(),
            None => {
                let stdout = run_cargo(&dir, &["locate-project", "--workspace", "--message-format", "plain"])
                    .map_err(|e| no_project(dir.display().to_string(), format!("is not in a Cargo workspace cargo can read: {e}")))?;
                let located = PathBuf::from(String::from_utf8_lossy(&stdout).trim());
                let root = canonical(located.parent().unwrap_or(&dir));
                roots.insert(dir.clone(), root.clone());
                root
            }
        };
        let at = match workspaces.iter().position(|(w, _)| w.root == root) {
            Some(at) => at,
            None => {
                let metadata = metadata(&root).map_err(|e| {
                    no_project(dir.display().to_string(), format!("is in the Cargo workspace at {}, which cargo cannot read: {e}", root.display()))
                })?;
                workspaces.push((WorkspaceBuild { root: root.clone(), target_dir: metadata.target_dir.clone(), functions: Vec::new() }, metadata));
                workspaces.len() - 1
            }
        };
        let (workspace, metadata) = &mut workspaces[at];
        let function = (f.logical_id.clone(), f.binary.clone());
        check_known(&dir, std::slice::from_ref(&function), &metadata.bins_at(&manifest))?;
        workspace.functions.push(function);
    }
    Ok(workspaces.into_iter().map(|(w, _)| w).collect())
}

/// Where the binaries of `functions` are, after building them unless [`Source::prebuilt`]: one
/// `cargo build --workspace --bin …` per Cargo workspace ([`plan`]), in its root.
///
/// With `prebuilt`, the directory is [`Source::target_dir`], else an absolute `CARGO_TARGET_DIR`,
/// else each workspace's target directory (`cargo metadata`) — so a template outside any Cargo
/// project runs with either of the first two.
///
/// # Errors
/// [`BinariesError`]: [`BinariesError::NoCargoProject`] or [`BinariesError::UnknownBinary`] naming
/// the function, before anything is built; [`BinariesError::Build`] naming the workspace whose
/// build failed.
pub fn prepare_functions(functions: &[FunctionSpec], source: &Source) -> Result<BinDirs, BinariesError> {
    if source.prebuilt {
        let env_target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).filter(|t| t.is_absolute());
        if let Some(t) = source.target_dir.clone().or(env_target) {
            return Ok(BinDirs::Shared(t.join("debug")));
        }
        let workspaces = plan(functions).map_err(|e| BinariesError::NoTargetDir { reason: e.to_string() })?;
        return Ok(bin_dirs(&workspaces, None));
    }
    let workspaces = plan(functions)?;
    for w in &workspaces {
        build(&w.root, w.functions.iter().map(|(_, b)| b.as_str()), source.target_dir.as_deref())?;
    }
    Ok(bin_dirs(&workspaces, source.target_dir.as_deref()))
}

/// Each function's `<target dir>/debug`: `target_dir` when given, else its workspace's.
fn bin_dirs(workspaces: &[WorkspaceBuild], target_dir: Option<&Path>) -> BinDirs {
    BinDirs::PerFunction(
        workspaces
            .iter()
            .flat_map(|w| w.functions.iter().map(move |(id, _)| (id.clone(), target_dir.unwrap_or(&w.target_dir).join("debug"))))
            .collect(),
    )
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

    /// A function `id` built from `code_uri` as `binary`.
    fn function(id: &str, binary: &str, code_uri: Option<PathBuf>) -> FunctionSpec {
        let template = outbox_template::Template::parse(
            Path::new("t.yaml"),
            &format!("Resources:\n  {id}:\n    Type: AWS::Serverless::Function\n    Metadata: {{BuildProperties: {{Binary: {binary}}}}}\n"),
        )
        .expect("a template");
        FunctionSpec { code_uri, ..template.functions().expect("its function").remove(0) }
    }

    /// A temporary directory, removed when dropped.
    struct TempDir(PathBuf);
    impl TempDir {
        fn new(what: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("outbox-local-{what}-{}", uuid::Uuid::new_v4()));
            std::fs::create_dir_all(&dir).expect("a temporary directory");
            Self(dir.canonicalize().expect("it exists"))
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A Cargo package at `dir` with bin `name` (no dependencies), `[workspace]` of its own with
    /// `members` when given.
    fn package(dir: &Path, name: &str, workspace: Option<&[&str]>) {
        std::fs::create_dir_all(dir.join("src")).expect("its directory");
        let workspace = workspace.map(|m| format!("\n[workspace]\nmembers = {m:?}\n")).unwrap_or_default();
        std::fs::write(dir.join("Cargo.toml"), format!("[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n{workspace}"))
            .expect("its manifest");
        std::fs::write(dir.join("src/main.rs"), "fn main() {}\n").expect("its main");
    }

    /// Two Cargo workspaces: `one/` (package `one` at the root, member `one/member`) and `two/`
    /// (package `two`), side by side in a temporary directory, as a service and a copied block.
    fn two_workspaces() -> TempDir {
        let tmp = TempDir::new("two-workspaces");
        package(&tmp.0.join("one"), "one", Some(&[".", "member"]));
        package(&tmp.0.join("one/member"), "member", None);
        package(&tmp.0.join("two"), "two", Some(&["."]));
        tmp
    }

    #[test]
    fn functions_are_grouped_by_the_cargo_workspace_of_their_code_uri_and_built_once_per_workspace() {
        let tmp = two_workspaces();
        let functions = [
            function("OneFunction", "one", Some(tmp.0.join("one"))),
            function("TwoFunction", "two", Some(tmp.0.join("two/."))),
            function("MemberFunction", "member", Some(tmp.0.join("one/member"))),
        ];
        let workspaces = plan(&functions).expect("both are Cargo projects");
        let grouped: Vec<(PathBuf, Vec<&str>)> =
            workspaces.iter().map(|w| (w.root.clone(), w.functions.iter().map(|(id, _)| id.as_str()).collect())).collect();
        assert_eq!(grouped, [(tmp.0.join("one"), vec!["OneFunction", "MemberFunction"]), (tmp.0.join("two"), vec!["TwoFunction"])]);

        let target = tmp.0.join("target");
        let dirs = prepare_functions(&functions, &Source { prebuilt: false, target_dir: Some(target.clone()) }).expect("both build");
        for (id, binary) in [("OneFunction", "one"), ("TwoFunction", "two"), ("MemberFunction", "member")] {
            let dir = dirs.of(id).unwrap_or_else(|| panic!("{id} has a directory"));
            assert_eq!(dir, target.join("debug"));
            assert!(dir.join(binary).is_file(), "{binary} was built");
        }
        // Each workspace keeps its own lock file: cargo ran in each root.
        assert!(tmp.0.join("one/Cargo.lock").is_file() && tmp.0.join("two/Cargo.lock").is_file());
    }

    #[test]
    fn a_binary_that_is_not_a_bin_of_its_code_uri_is_an_error_naming_the_function_before_any_build() {
        let tmp = two_workspaces();
        // `two` is a bin of the other workspace, and `member` not one of the packages cargo
        // builds in `one/member` (nor is `one`, the root's: `sam build` runs cargo in CodeUri).
        for (binary, code_uri, known) in [("two", "one", "one"), ("one", "one/member", "member")] {
            let functions = [function("TwoFunction", "two", Some(tmp.0.join("two"))), function("ShipFunction", binary, Some(tmp.0.join(code_uri)))];
            let err = prepare_functions(&functions, &Source::default()).expect_err("not a bin there").to_string();
            let expected = format!(
                "ShipFunction: its Binary {binary:?} (Metadata.BuildProperties.Binary) is not a bin target of the Cargo project at {}; bin targets there: {known}",
                tmp.0.join(code_uri).display()
            );
            assert_eq!(err, expected);
            assert!(!tmp.0.join("two/Cargo.lock").exists(), "nothing was built before the check");
        }
        let echo = root().join("tests/fixtures/echo-function");
        let sample = [function("EchoFunction", "echo-function", Some(echo)), function("ShipFunction", "no-such-binary", Some(root()))];
        let err = prepare_functions(&sample, &Source::default()).expect_err("no-such-binary is not a bin target").to_string();
        assert!(err.starts_with("ShipFunction: its Binary \"no-such-binary\" (Metadata.BuildProperties.Binary) is not a bin target"), "{err}");
    }

    #[test]
    fn a_code_uri_without_a_cargo_project_is_an_error_naming_the_function() {
        let tmp = TempDir::new("no-project");
        std::fs::create_dir_all(tmp.0.join("function")).expect("a directory");
        let cases = [
            (Some(tmp.0.join("function")), format!("its CodeUri {} has no Cargo.toml, in it or above it", tmp.0.join("function").display())),
            (Some(tmp.0.join("missing")), format!("its CodeUri {} is not a directory here", tmp.0.join("missing").display())),
            (None, "its CodeUri (CodeUri) is not a local directory (an S3 location)".to_owned()),
        ];
        for (code_uri, expected) in cases {
            let err =
                prepare_functions(&[function("RelayFunction", "outbox-relay", code_uri)], &Source::default()).expect_err("no project").to_string();
            assert!(err.starts_with(&format!("RelayFunction: {expected}")), "{err}");
            assert!(err.contains("runs `cargo lambda build --bin outbox-relay` there"), "{err}");
        }
    }

    #[test]
    fn prebuilt_binaries_need_no_cargo_project_when_the_target_dir_is_given() {
        let outside = TempDir::new("no-project");
        let functions = [function("EchoFunction", "echo-function", Some(outside.0.clone()))];
        let given = Source { prebuilt: true, target_dir: Some(outside.0.join("t")) };
        let dirs = prepare_functions(&functions, &given).expect("no cargo needed");
        assert_eq!(dirs.of("EchoFunction"), Some(outside.0.join("t/debug").as_path()));
    }

    #[test]
    fn known_binaries_pass_the_check() {
        let known: BTreeSet<String> = ["a".to_owned(), "b".to_owned()].into();
        assert!(check_known(Path::new("."), &[("F".into(), "a".into())], &known).is_ok());
        assert!(matches!(check_known(Path::new("."), &[("F".into(), "c".into())], &known), Err(BinariesError::UnknownBinary { .. })));
    }
}
