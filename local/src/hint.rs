//! The commands the runtime's hints print (`up`'s `dlq list`, `demo --keep`'s `trace`, `dlq
//! practice`'s next steps), written so that the user can paste them where they are: the program
//! as it was invoked ([`program`]) with the `--template` and `--stack-name` they passed, and the
//! emulator's endpoint as `AWS_ENDPOINT_URL`.

use std::ffi::OsStr;
use std::path::Path;

/// This program as the user can run it again: its name when it was found on `PATH` (invoked
/// without a `/`, e.g. `outbox-local` after `cargo install`), else the path of the running
/// executable (e.g. `/…/target/debug/outbox-local` under `cargo run`), which works from any
/// directory.
pub fn program() -> String {
    let argv0 = std::env::args_os().next();
    program_from(argv0.as_deref(), std::env::current_exe().ok().as_deref())
}

/// [`program`] from `argv[0]` and the running executable's path.
fn program_from(argv0: Option<&OsStr>, exe: Option<&Path>) -> String {
    match (argv0.and_then(OsStr::to_str), exe) {
        (Some(name), _) if !name.is_empty() && !name.contains('/') => name.to_owned(),
        (_, Some(exe)) => quoted(&exe.display().to_string()),
        (Some(name), None) => quoted(name),
        (None, None) => "outbox-local".to_owned(),
    }
}

/// The command that runs `program` again on the same template and stack: `AWS_ENDPOINT_URL=<endpoint>`
/// in front when given, then `--template` and `--stack-name` when the user gave them; the verb
/// and its arguments follow.
pub fn command(program: &str, template: Option<&Path>, stack_name: Option<&str>, endpoint: Option<&str>) -> String {
    let mut words = Vec::new();
    if let Some(url) = endpoint {
        words.push(format!("AWS_ENDPOINT_URL={}", quoted(url)));
    }
    words.push(program.to_owned());
    if let Some(t) = template {
        words.push(format!("--template {}", quoted(&t.display().to_string())));
    }
    if let Some(s) = stack_name {
        words.push(format!("--stack-name {}", quoted(s)));
    }
    words.join(" ")
}

/// `word` as one word of a POSIX shell: as it is when it has only characters no shell treats
/// specially, else in single quotes.
fn quoted(word: &str) -> String {
    if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c)) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_is_named_as_found_on_path_else_by_the_running_executables_path() {
        let exe = Path::new("/home/me/outbox/target/debug/outbox-local");
        assert_eq!(program_from(Some(OsStr::new("outbox-local")), Some(exe)), "outbox-local");
        assert_eq!(program_from(Some(OsStr::new("target/debug/outbox-local")), Some(exe)), exe.display().to_string());
        assert_eq!(program_from(Some(OsStr::new("./outbox-local")), Some(Path::new("/my dir/outbox-local"))), "'/my dir/outbox-local'");
        assert_eq!(program_from(None, None), "outbox-local");
    }

    #[test]
    fn the_command_carries_the_endpoint_template_and_stack_name_given() {
        assert_eq!(command("outbox-local", None, None, None), "outbox-local");
        assert_eq!(
            command("outbox-local", Some(Path::new("svc/template.yaml")), Some("shop"), Some("http://127.0.0.1:5000")),
            "AWS_ENDPOINT_URL=http://127.0.0.1:5000 outbox-local --template svc/template.yaml --stack-name shop"
        );
        assert_eq!(command("outbox-local", Some(Path::new("it's here/t.yaml")), None, None), r"outbox-local --template 'it'\''s here/t.yaml'");
    }
}
