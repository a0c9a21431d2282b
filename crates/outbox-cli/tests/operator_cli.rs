//! The `outbox` binary's own surface, no AWS: its help and its refusal without a stack. (The verbs
//! against the emulator are tested where the emulator is, local/tests/operator_cli.rs.)

use std::process::Command;

#[test]
fn help_names_every_verb_and_the_stack_options() {
    let out = Command::new(env!("CARGO_BIN_EXE_outbox")).arg("--help").output().expect("runs");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for word in ["dlq", "trace", "webhooks", "ordering", "--stack", "--template", "--endpoint-url", "--yes"] {
        assert!(help.contains(word), "{word} in {help}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_outbox")).args(["dlq", "list"]).env_remove("OUTBOX_STACK").output().expect("runs");
    assert!(String::from_utf8_lossy(&out.stderr).contains("pass --stack NAME"), "{}", String::from_utf8_lossy(&out.stderr));
}
