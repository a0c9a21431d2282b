#!/usr/bin/env python3
"""Translates the SAM template to plain CloudFormation, offline, the way the SAM transform does.

    python3 scripts/translate_template.py [--check | --check-block] [TEMPLATE [OUTPUT]]
        (defaults: template.yaml, stdout)

With --check it also asserts that the delivery settings survived the translation (the stream
event source mapping's FilterCriteria, DestinationConfig and FunctionResponseTypes; an SQS
mapping's FunctionResponseTypes and its queue's RedrivePolicy, the queue being the template's or
a local block's output, e.g. the consumer kit's DeliveryQueueArn; the rule target's RetryPolicy
and DeadLetterConfig; an EventInvokeConfig's OnFailure destination, where there is one) and
prints the generated logical ids to stderr; a template made of building blocks (nested
applications with a local `Location`, as the sample's is) must generate a mapping and a rule
together with them (its blocks' own settings are checked by --check-block). --check-block checks a building
block (blocks/*): the same, except that a block need not generate every kind (the relay block has
no rule). It also checks the edge and the logs (what the
scanners cannot see through SAM's generated resources): every function logs to a log group of the
template that has a RetentionInDays (LoggingConfig.LogGroup), and every HTTP API stage has
throttling (DefaultRouteSettings) and access logs (AccessLogSettings).

Runs in the tools venv (`scripts/venv tools`: aws-sam-translator, aws-sam-cli). cfn-lint and
`sam validate` do not check SAM event properties; linting the translated template does (see
the team notes on local AWS tooling). No AWS account is needed:
  * the region comes from the environment (AWS_DEFAULT_REGION, default us-east-1);
  * a local CodeUri (e.g. `.`) is replaced by an s3:// placeholder, as `sam validate` does, and
    a nested application's local Location by an https:// one;
  * managed policies are not looked up in IAM (the loader returns an empty map), which only
    matters for policies given by name instead of ARN (this template uses none).
"""
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from samcli.yamlhelper import yaml_parse  # noqa: E402  (understands !Ref, !GetAtt, !Sub, ...)
from samtranslator.translator.transform import transform  # noqa: E402

PLACEHOLDER_CODE_URI = "s3://placeholder-bucket/placeholder-key.zip"
PLACEHOLDER_TEMPLATE_URL = "https://placeholder-bucket.s3.amazonaws.com/{}.template"


class NoManagedPolicies:
    """ManagedPolicyLoader stand-in that never calls IAM."""

    def load(self) -> dict:
        return {}


def is_local(uri) -> bool:
    return isinstance(uri, str) and not uri.startswith("s3://")


def replace_local_code_uris(template: dict) -> None:
    function_globals = template.get("Globals", {}).get("Function", {})
    if is_local(function_globals.get("CodeUri")):
        function_globals["CodeUri"] = PLACEHOLDER_CODE_URI
    for resource in template.get("Resources", {}).values():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        properties = resource.setdefault("Properties", {})
        if properties.get("PackageType", "Zip") == "Zip" and is_local(properties.get("CodeUri")):
            properties["CodeUri"] = PLACEHOLDER_CODE_URI
    # A nested application's local template becomes an uploaded one (`sam package` uploads it):
    # an https placeholder, so that the translation is a deployable template's.
    for name, resource in template.get("Resources", {}).items():
        location = resource.get("Properties", {}).get("Location") if resource.get("Type") == "AWS::Serverless::Application" else None
        if isinstance(location, str) and "://" not in location:
            resource["Properties"]["Location"] = PLACEHOLDER_TEMPLATE_URL.format(name)


def of_type(resources: dict, type_: str) -> dict:
    return {k: v.get("Properties", {}) for k, v in resources.items() if v.get("Type") == type_}


# What a template of building blocks must generate: the relay's stream mapping and the
# consumers' SQS mappings, the rules feeding their queues. No EventInvokeConfig: no consumer is
# invoked asynchronously (an EventInvokeConfig, where there is one, is still checked below).
DELIVERY_KINDS = {
    "event source mapping": "AWS::Lambda::EventSourceMapping",
    "rule": "AWS::Events::Rule",
}


def generated_kinds(translated: dict) -> set:
    """The delivery kinds (DELIVERY_KINDS' keys) a translated template generates."""
    resources = translated.get("Resources", {})
    return {kind for kind, type_ in DELIVERY_KINDS.items() if of_type(resources, type_)}


def nested_translations(template: dict, source: Path) -> list:
    """The translations of the template's nested applications whose `Location` is a local path
    (relative to `source`), as (logical id, translated template)."""
    out = []
    for name, resource in template.get("Resources", {}).items():
        location = resource.get("Properties", {}).get("Location")
        if resource.get("Type") != "AWS::Serverless::Application" or not isinstance(location, str) or "://" in location:
            continue
        path = source.parent / location
        child = yaml_parse((path / "template.yaml" if path.is_dir() else path).read_text(encoding="utf-8"))
        replace_local_code_uris(child)
        out.append((name, transform(child, {}, NoManagedPolicies())))
    return out


def mapped_queue(source, resources: dict, nested: dict):
    """The queue an event source mapping's EventSourceArn names, as (description, resource), or
    None when it names no queue (a stream): `!GetAtt Queue.Arn` of the template, or
    `!GetAtt App.Outputs.X` of a nested application in `nested` whose output X is
    `!GetAtt Queue.Arn` of its template (the consumer kit's DeliveryQueueArn). A nested output
    that cannot be followed is ("App.Outputs.X", None)."""
    attr = source.get("Fn::GetAtt") if isinstance(source, dict) else None
    if not isinstance(attr, list) or len(attr) != 2:
        return None
    target, name = attr
    if resources.get(target, {}).get("Type") == "AWS::SQS::Queue":
        return target, resources[target]
    if not (isinstance(name, str) and name.startswith("Outputs.")):
        return None
    where = f"{target}.{name}"
    child = nested.get(target)
    if child is None:
        return where, None
    value = child.get("Outputs", {}).get(name[len("Outputs."):], {}).get("Value")
    inner = value.get("Fn::GetAtt") if isinstance(value, dict) else None
    if not (isinstance(inner, list) and len(inner) == 2 and inner[1] == "Arn"):
        return where, None
    queue = child.get("Resources", {}).get(inner[0], {})
    return f"{where} ({target}/{inner[0]})", queue if queue.get("Type") == "AWS::SQS::Queue" else None


def check_delivery_settings(translated: dict, every_kind: bool = True, nested: dict | None = None) -> list:
    """Returns what is missing from the generated delivery resources (empty when all is there);
    every_kind: the template, with the `nested` translations of its blocks (by application
    logical id), must generate a mapping and a rule."""
    nested = nested or {}
    resources = translated.get("Resources", {})
    missing = []
    mappings = of_type(resources, "AWS::Lambda::EventSourceMapping")
    rules = of_type(resources, "AWS::Events::Rule")
    invoke_configs = of_type(resources, "AWS::Lambda::EventInvokeConfig")
    kinds = generated_kinds(translated).union(*(generated_kinds(child) for child in nested.values()))
    for kind in DELIVERY_KINDS:
        if kind not in kinds and every_kind:
            missing.append(f"no {kind} was generated (by the template or its blocks)")
    for name, props in mappings.items():
        if not props.get("FunctionResponseTypes"):
            missing.append(f"{name}: no FunctionResponseTypes")
        queue = mapped_queue(props.get("EventSourceArn"), resources, nested)
        if queue is not None:
            # An SQS mapping has no on-failure destination: the queue's redrive policy is its DLQ.
            # No FilterCriteria needed: the rule feeding the queue chose the events (a mapping's
            # filter deletes what it does not match, without invoking).
            where, resource = queue
            if resource is None:
                missing.append(f"{name}: its queue {where} is not an SQS queue of the template or a local block")
            elif not resource.get("Properties", {}).get("RedrivePolicy", {}).get("deadLetterTargetArn"):
                missing.append(f"{name}: queue {where} has no RedrivePolicy.deadLetterTargetArn")
        else:
            if not props.get("FilterCriteria"):
                missing.append(f"{name}: no FilterCriteria")
            if not props.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination"):
                missing.append(f"{name}: no DestinationConfig.OnFailure.Destination")
        print(f"translate_template: event source mapping {name}", file=sys.stderr)
    for name, props in rules.items():
        for target in props.get("Targets", []):
            for key in ("RetryPolicy", "DeadLetterConfig"):
                if not target.get(key):
                    missing.append(f"{name} target {target.get('Id')}: no {key}")
        print(f"translate_template: rule {name}", file=sys.stderr)
    for name, props in invoke_configs.items():
        if not props.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination"):
            missing.append(f"{name}: no DestinationConfig.OnFailure.Destination")
        print(f"translate_template: event invoke config {name}", file=sys.stderr)
    return missing


def check_logs_and_edge(translated: dict) -> list:
    """Returns what is missing from the functions' log groups and the HTTP API stages."""
    resources = translated.get("Resources", {})
    missing = []
    for name, props in of_type(resources, "AWS::Lambda::Function").items():
        group = props.get("LoggingConfig", {}).get("LogGroup")
        target = group.get("Ref") if isinstance(group, dict) else None
        log_group = resources.get(target, {}) if target else {}
        if log_group.get("Type") != "AWS::Logs::LogGroup":
            missing.append(f"{name}: LoggingConfig.LogGroup is not a !Ref to an AWS::Logs::LogGroup of the template")
        elif "RetentionInDays" not in log_group.get("Properties", {}):
            missing.append(f"{name}: its log group {target} has no RetentionInDays")
    for name, props in of_type(resources, "AWS::ApiGatewayV2::Stage").items():
        route = props.get("DefaultRouteSettings", {})
        if "ThrottlingRateLimit" not in route or "ThrottlingBurstLimit" not in route:
            missing.append(f"{name}: no DefaultRouteSettings throttling (rate and burst)")
        if not props.get("AccessLogSettings", {}).get("DestinationArn"):
            missing.append(f"{name}: no AccessLogSettings")
        print(f"translate_template: HTTP API stage {name}", file=sys.stderr)
    return missing


def main() -> int:
    args = sys.argv[1:]
    block = "--check-block" in args
    check = "--check" in args or block
    args = [a for a in args if a not in ("--check", "--check-block")]
    source = Path(args[0] if args else "template.yaml")
    template = yaml_parse(source.read_text(encoding="utf-8"))
    nested = dict(nested_translations(template, source)) if check and not block else {}
    replace_local_code_uris(template)
    translated = transform(template, {}, NoManagedPolicies())
    if check:
        missing = check_delivery_settings(translated, every_kind=not block, nested=nested) + check_logs_and_edge(translated)
        for problem in missing:
            print(f"translate_template: {problem}", file=sys.stderr)
        if missing:
            return 1
    text = json.dumps(translated, indent=2, sort_keys=False) + "\n"
    if len(args) > 1:
        Path(args[1]).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
