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
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_outbox-local"))
        .arg("--template")
        .arg(fixture().join("template.yaml"))
        .args(["--endpoint", endpoint, "invoke", "EchoFunction", "-e", "-"])
        .env("OUTBOX_TEST_PARENT_ONLY", "must not reach the function")
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("outbox-local starts");
    child.stdin.take().expect("stdin").write_all(event.as_bytes()).expect("writing the event");
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
    assert_eq!(response["function_name"], "outbox-pattern-EchoFunction", "{response}");
    assert_eq!((response["memory_size"].as_str(), response["version"].as_str()), (Some("192"), Some("$LATEST")), "{response}");
    assert_eq!(response["endpoint"].as_str(), Some(emulator.endpoint.as_str()), "{response}");
    assert_eq!(response["leaked"], Value::Null, "the caller's environment leaked into the function: {response}");
    let arn = response["invoked_function_arn"].as_str().unwrap_or_default();
    assert!(arn.starts_with("arn:aws:lambda:") && arn.ends_with(":function:outbox-pattern-EchoFunction"), "{response}");
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
