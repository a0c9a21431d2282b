//! `outbox-local invoke` runs a function that is not part of the sample application: the
//! fixture `tests/fixtures/echo-function` (its own template and binary crate) is built by the CLI
//! with cargo and run as its real binary behind the Lambda Runtime API, with the environment
//! Lambda would give it and nothing of the caller's.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use outbox_local::emulator::Emulator;
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fixture() -> PathBuf {
    root().join("tests/fixtures/echo-function")
}

/// `outbox-local --template <fixture> --endpoint <endpoint> invoke EchoFunction -e -` with
/// `event` on stdin.
fn invoke(endpoint: &str, event: &str) -> Output {
    let args = ["--template".into(), fixture().join("template.yaml").into_os_string(), "--endpoint".into(), endpoint.into()];
    outbox_local(&args, &["invoke", "EchoFunction", "-e", "-"], event, |c| c)
}

/// `outbox-local <args…> <more…>` with `stdin`, the command adjusted by `adjust`.
fn outbox_local(args: &[std::ffi::OsString], more: &[&str], stdin: &str, adjust: impl FnOnce(&mut Command) -> &mut Command) -> Output {
    use std::io::Write;
    let mut command = Command::new(env!("CARGO_BIN_EXE_outbox-local"));
    command.args(args).args(more).env("OUTBOX_TEST_PARENT_ONLY", "must not reach the function");
    let mut child = adjust(&mut command)
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("outbox-local starts");
    // The CLI may exit before reading stdin (a bad flag): a failed write is then expected.
    let _ = child.stdin.take().expect("stdin is piped").write_all(stdin.as_bytes());
    child.wait_with_output().expect("outbox-local ends")
}

fn json_of(output: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stdout}\nstderr: {}", String::from_utf8_lossy(&output.stderr)))
}

#[tokio::test]
async fn invoke_runs_a_function_of_another_template_as_its_real_binary() {
    let emulator = Emulator::start(&root()).await.expect("the moto emulator starts");
    let event_text = std::fs::read_to_string(fixture().join("events/echo.json")).expect("the fixture event");

    let output = invoke(&emulator.endpoint, &event_text);
    assert!(output.status.success(), "{output:?}");
    let response = json_of(&output);
    let event: Value = serde_json::from_str(&event_text).expect("JSON");
    assert_eq!(response["echo"], event, "the event reaches the function verbatim: {response}");
    assert_eq!(response["greeting"], "hello from the template", "the template's environment: {response}");
    // No samconfig.toml beside the fixture's template: the stack is named after its directory, and
    // the function as CloudFormation names an unnamed one: <stack>-<logical id>-<suffix>.
    let name = response["function_name"].as_str().unwrap_or_default();
    assert!(name.starts_with("echo-function-EchoFunction-") && name.len() == "echo-function-EchoFunction-".len() + 12, "{response}");
    assert_eq!((response["memory_size"].as_str(), response["version"].as_str()), (Some("192"), Some("$LATEST")), "{response}");
    assert_eq!(response["endpoint"].as_str(), Some(emulator.endpoint.as_str()), "{response}");
    assert_eq!(response["leaked"], Value::Null, "the caller's environment leaked into the function: {response}");
    let arn = response["invoked_function_arn"].as_str().unwrap_or_default();
    assert!(arn.starts_with("arn:aws:lambda:") && arn.ends_with(&format!(":function:{name}")), "{response}");
    let left = response["deadline_in_ms"].as_u64().unwrap_or(0);
    assert!(left > 0 && left <= 5_000, "the deadline is epoch ms within Timeout (5 s) from now: {response}");
    assert!(response["trace_id"].as_str().is_some_and(|t| t.starts_with("Root=1-")), "{response}");

    // A function error is the invocation's error; a crash is Runtime.ExitError. Both exit 1.
    let failed = invoke(&emulator.endpoint, r#"{"fail": "no such order"}"#);
    assert!(!failed.status.success(), "{failed:?}");
    assert_eq!(json_of(&failed)["errorMessage"], "no such order", "{failed:?}");
    let crashed = invoke(&emulator.endpoint, r#"{"exit": 3}"#);
    assert!(!crashed.status.success(), "{crashed:?}");
    assert_eq!(json_of(&crashed)["errorType"], "Runtime.ExitError", "{crashed:?}");
}

/// The directory cargo builds this test's binaries in (`<it>/debug/outbox-local`).
fn target_dir() -> PathBuf {
    let exe = Path::new(env!("CARGO_BIN_EXE_outbox-local"));
    exe.parent().and_then(Path::parent).expect("the binary is in <target>/debug").to_owned()
}

/// A copy of the fixture's template in a directory outside any Cargo project, with two more
/// functions: a Python one (no Binary) and one whose Binary cargo does not know.
fn template_elsewhere() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("outbox-local-copy-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let mut text = std::fs::read_to_string(fixture().join("template.yaml")).expect("the fixture's template");
    text.push_str(
        "  PyFunction:\n    Type: AWS::Serverless::Function\n    Properties: {Runtime: python3.13, Handler: app.handler, CodeUri: py/}\n  \
         BadFunction:\n    Type: AWS::Serverless::Function\n    Metadata: {BuildProperties: {Binary: no-such-binary}}\n    Properties: {CodeUri: .}\n",
    );
    std::fs::write(dir.join("template.yaml"), text).expect("writing the template");
    dir
}

fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn invoke_names_an_unknown_function_before_building_anything() {
    let dir = template_elsewhere();
    let args = ["--template".into(), dir.join("template.yaml").into_os_string(), "--endpoint".into(), "http://127.0.0.1:9".into()];
    let unknown = outbox_local(&args, &["invoke", "NoSuchFunction", "-e", "-"], "{}", |c| c);
    let stderr = stderr_of(&unknown);
    assert!(!unknown.status.success(), "{unknown:?}");
    assert!(stderr.contains("no function \"NoSuchFunction\"") && stderr.contains("functions: EchoFunction, PyFunction, BadFunction"), "{stderr}");
    assert!(!stderr.contains("cargo"), "nothing was built: {stderr}");
    let python = outbox_local(&args, &["invoke", "PyFunction", "-e", "-"], "{}", |c| c);
    assert!(stderr_of(&python).contains("PyFunction.Metadata.BuildProperties.Binary: is required"), "{python:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_endpoint_is_an_error_naming_the_flag_before_anything_runs() {
    let args = ["--template".into(), fixture().join("template.yaml").into_os_string(), "--endpoint".into(), "not-a-url".into()];
    let output = outbox_local(&args, &["invoke", "EchoFunction", "-e", "-"], "{}", |c| c);
    let stderr = stderr_of(&output);
    assert!(!output.status.success(), "{output:?}");
    assert!(stderr.starts_with("outbox-local: --endpoint (or AWS_ENDPOINT_URL) \"not-a-url\""), "{stderr}");
    assert!(stderr.len() < 400, "a short message: {stderr}");
}

#[test]
fn invoke_runs_prebuilt_binaries_of_a_template_outside_any_cargo_project() {
    let target = target_dir();
    // scripts/test builds every workspace binary before the tests (OUTBOX_LOCAL_NO_BUILD=1):
    // building echo-function alone would compile its dependencies once more, in its own features.
    if !std::env::var_os("OUTBOX_LOCAL_NO_BUILD").is_some_and(|v| !v.is_empty() && v != "0") {
        let built = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", "echo-function", "--target-dir"])
            .arg(&target)
            .current_dir(root())
            .status()
            .expect("cargo runs");
        assert!(built.success(), "building echo-function: {built}");
    }
    assert!(target.join("debug/echo-function").is_file(), "echo-function is built in {}", target.display());
    let dir = template_elsewhere();
    let args = ["--template".into(), dir.join("template.yaml").into_os_string(), "--endpoint".into(), "http://127.0.0.1:9".into()];

    // The other functions (no Binary; a Binary that does not exist) do not stop EchoFunction.
    let explicit = outbox_local(&args, &["--no-build", "--target-dir", &target.to_string_lossy(), "invoke", "EchoFunction", "-e", "-"], "{}", |c| c);
    assert!(explicit.status.success(), "{explicit:?}");
    // CloudFormation's shape for an unnamed function, <stack>-<logical id>-<12-character suffix>,
    // its head cut so that the whole fits Lambda's 64 characters (the stack is the directory).
    let name = json_of(&explicit)["function_name"].as_str().unwrap_or_default().to_owned();
    let head: String = format!("{}-EchoFunction", dir.file_name().unwrap_or_default().to_string_lossy()).chars().take(64 - 13).collect();
    assert!(name.len() <= 64 && name.starts_with(&format!("{head}-")) && name.len() == head.len() + 13, "{name}");

    let from_env = outbox_local(&args, &["--no-build", "invoke", "EchoFunction", "-e", "-"], "{}", |c| c.env("CARGO_TARGET_DIR", &target));
    assert!(from_env.status.success(), "{from_env:?}");

    let neither = outbox_local(&args, &["--no-build", "invoke", "EchoFunction", "-e", "-"], "{}", |c| c.env_remove("CARGO_TARGET_DIR"));
    let stderr = stderr_of(&neither);
    assert!(!neither.status.success(), "{neither:?}");
    assert!(stderr.contains("pass --target-dir DIR") && stderr.contains("CARGO_TARGET_DIR"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_stack_name_cloudformation_refuses_is_refused_before_anything_is_written_or_started() {
    let args = ["--template".into(), fixture().join("template.yaml").into_os_string()];
    for bad in ["../escape-by-stack-name", "a/b", "my_stack", &"s".repeat(129)] {
        // `token` writes the issuer's key under .local/<stack>/: nothing may be written for a
        // name AWS refuses (it would also be a path outside .local/).
        let output = outbox_local(&args, &["--stack-name", bad, "token", "--sub", "alice"], "", |c| c);
        let stderr = stderr_of(&output);
        assert!(!output.status.success() && stderr.contains("stack name"), "{bad}: {output:?}");
        assert!(!stderr.contains("emulator"), "{bad}: refused before the emulator starts: {stderr}");
    }
    assert!(!fixture().join("escape-by-stack-name").exists() && !root().join("escape-by-stack-name").exists());
}

#[test]
fn an_empty_event_id_is_refused_by_trace_with_the_argument_named() {
    let args = ["--template".into(), fixture().join("template.yaml").into_os_string(), "--endpoint".into(), "http://127.0.0.1:9".into()];
    let output = outbox_local(&args, &["trace", ""], "", |c| c);
    let stderr = stderr_of(&output);
    assert_eq!(output.status.code(), Some(2), "a usage error: {output:?}");
    assert!(stderr.contains("EVENT_ID") && stderr.len() < 600, "{stderr}");
}
