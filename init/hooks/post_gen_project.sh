#!/usr/bin/env bash
# Runs in the new service's directory once cookiecutter has written it (a shell hook, not Python:
# SAM CLI's installer bundle cannot run Python hooks):
#   1. copies the building blocks it uses (relay, consumer-kit) from the outbox repository this
#      template came from (a path, or cookiecutter's clone of a git URL) into blocks/;
#   2. writes .cargo/config.toml: the outbox crates from git until they are published, from
#      outbox_git_url, else the repository URL of the outbox repository's Cargo.toml
#      ([workspace.package] repository, the one place it is set);
#   3. starts Cargo.lock from the outbox repository's, so the first build takes the dependency
#      versions the outbox is tested with (cargo drops what the service does not use).
set -euo pipefail
outbox_repo="$(cd '{{ cookiecutter._repo_dir }}/..' && pwd)"
url='{{ cookiecutter.outbox_git_url }}'
fail() { echo "outbox-service: $*" >&2; exit 1; }

for block in relay consumer-kit; do
  [ -f "$outbox_repo/blocks/$block/template.yaml" ] || fail "$outbox_repo/blocks/$block/template.yaml not found: init/ must sit in the outbox repository beside blocks/"
  mkdir -p blocks
  cp -R "$outbox_repo/blocks/$block" "blocks/$block"
  # A build made inside the block's folder is not part of it.
  rm -rf "blocks/$block/function/target" "blocks/$block/function/Cargo.lock"
done
[ -f blocks/relay/function/Cargo.toml ] || fail "the relay block in $outbox_repo has no function crate (blocks/relay/function/Cargo.toml)"

if [ -z "$url" ]; then
  url="$(awk '/^\[/ { section = $0 } section == "[workspace.package]" && $1 == "repository" { sub(/^[^"]*"/, ""); sub(/".*$/, ""); print; exit }' "$outbox_repo/Cargo.toml")"
  [ -n "$url" ] || fail "no repository URL in $outbox_repo/Cargo.toml ([workspace.package] repository); pass one: --extra-context '{\"outbox_git_url\": \"<git URL of the outbox repository>\"}'"
fi
case "$url" in
  *example*) fail "the outbox repository's URL is a placeholder ($url): pass the real one, --extra-context '{\"outbox_git_url\": \"<git URL of the outbox repository>\"}' (e.g. file:///path/to/a/clone), or set [workspace.package] repository in $outbox_repo/Cargo.toml" ;;
esac
mkdir -p .cargo
cat > .cargo/config.toml <<TOML
# The outbox crates from the outbox repository, until they are published on crates.io (then delete
# this file). The manifests (the service's and the relay block's) depend on them by version; cargo
# reads [patch] from config files too, so they stay as they are. Pin a commit with rev = "<sha>".
[patch.crates-io]
outbox = { git = "$url" }
outbox-lambda = { git = "$url" }
outbox-webhooks = { git = "$url" }
TOML

[ ! -f "$outbox_repo/Cargo.lock" ] || cp "$outbox_repo/Cargo.lock" Cargo.lock
# The README's install line names the same repository.
sed -i.bak "s|@OUTBOX_GIT_URL@|$url|g" README.md && rm -f README.md.bak

echo "outbox-service: {{ cookiecutter.project_name }} is ready (the outbox crates from $url). Next, in {{ cookiecutter.project_name }}/: see README.md"
