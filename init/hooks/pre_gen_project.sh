#!/usr/bin/env bash
# Refuses names that would not make a valid service before anything is written (a shell hook,
# not Python: SAM CLI's installer bundle cannot run Python hooks).
set -euo pipefail
project_name='{{ cookiecutter.project_name }}'
event_source='{{ cookiecutter.event_source }}'
# The directory, the stack name in samconfig.toml and the tables' names (<stack>-orders): what a
# CloudFormation stack name takes (letters, digits, hyphens; a letter first; at most 128).
if ! [[ "$project_name" =~ ^[A-Za-z][A-Za-z0-9-]{0,127}$ ]]; then
  echo "outbox-service: project_name '$project_name' is not a stack name: letters, digits and hyphens, a letter first, at most 128 characters" >&2
  exit 1
fi
# EventBridge's `source` of the events (PutEvents: at most 256 characters; a `source` starting
# with aws. is AWS's).
if [ -z "$event_source" ] || [ "${event_source:0:4}" = "aws." ] || [ "$(printf %s "$event_source" | wc -c)" -gt 256 ] \
  || ! [[ "$event_source" =~ ^[A-Za-z0-9._-]+$ ]]; then
  echo "outbox-service: event_source '$event_source' is not an event source: letters, digits, '.', '_' and '-', at most 256 characters, not starting with aws." >&2
  exit 1
fi
