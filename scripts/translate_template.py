#!/usr/bin/env python3
"""Translates the SAM template to plain CloudFormation, offline, the way the SAM transform does.

    python3 scripts/translate_template.py [--check | --check-block] [--parameter NAME=VALUE ...]
        [--nested-out DIR] [TEMPLATE [OUTPUT]]        (defaults: template.yaml, stdout)

With --parameter (repeated) the template is first resolved as CloudFormation would deploy it with
those values (scripts/resolve_parameters.py: resources and outputs whose condition is false
removed, decided Fn::If replaced), and so are its local blocks, with the values it gives them:
the checks below then see that variant only (scripts/check-template checks the sample with
EventBusType=Custom this way). --nested-out DIR writes each local block's translation, as the
template uses it, to DIR/translated-<application logical id>.json (for cfn-lint).

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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from resolve_parameters import ParameterError, nested_parameters, parameter_values, resolve  # noqa: E402

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
# On the Custom Event Bus a subscriber takes a rule's place (EventBusType Custom).
SUBSCRIBER = "AWS::EventsV2::Subscriber"


def generated_kinds(translated: dict) -> set:
    """The delivery kinds (DELIVERY_KINDS' keys) a translated template generates."""
    resources = translated.get("Resources", {})
    kinds = {kind for kind, type_ in DELIVERY_KINDS.items() if of_type(resources, type_)}
    return kinds | ({"rule"} if of_type(resources, SUBSCRIBER) else set())


def nested_translations(template: dict, source: Path, parent_params: dict | None = None) -> list:
    """The translations of the template's nested applications whose `Location` is a local path
    (relative to `source`), as (logical id, translated template); with `parent_params` (the
    template's parameter values, when it was resolved) each block is first resolved with the
    values the template gives it."""
    out = []
    for name, resource in template.get("Resources", {}).items():
        location = resource.get("Properties", {}).get("Location")
        if resource.get("Type") != "AWS::Serverless::Application" or not isinstance(location, str) or "://" in location:
            continue
        path = source.parent / location
        path = path / "template.yaml" if path.is_dir() else path
        child = yaml_parse(path.read_text(encoding="utf-8"))
        if parent_params is not None:
            child = resolve(child, nested_parameters(resource, parent_params), str(path))
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
    for name, props in of_type(resources, SUBSCRIBER).items():
        # The bus's own retries (at most 24 h), then the on-failure queue; a role to deliver with.
        if not props.get("RetryPolicy"):
            missing.append(f"{name}: no RetryPolicy")
        if not props.get("OnFailureConfiguration", {}).get("Arn"):
            missing.append(f"{name}: no OnFailureConfiguration.Arn")
        if not props.get("InvokeConfiguration", {}).get("RoleArn"):
            missing.append(f"{name}: no InvokeConfiguration.RoleArn")
        print(f"translate_template: subscriber {name}", file=sys.stderr)
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
    given, nested_out, rest = {}, None, []
    while args:
        arg = args.pop(0)
        if arg in ("--parameter", "--nested-out") and not args:
            print(f"translate_template: {arg} needs a value", file=sys.stderr)
            return 2
        if arg == "--parameter":
            name, sep, value = args.pop(0).partition("=")
            if not sep:
                print(f"translate_template: --parameter takes NAME=VALUE, got {name!r}", file=sys.stderr)
                return 2
            given[name] = value
        elif arg == "--nested-out":
            nested_out = Path(args.pop(0))
        else:
            rest.append(arg)
    args = rest
    source = Path(args[0] if args else "template.yaml")
    template = yaml_parse(source.read_text(encoding="utf-8"))
    parent_params = None
    if given:
        try:
            parent_params = parameter_values(template, given, str(source))
            template = resolve(template, given, str(source))
        except ParameterError as e:
            print(f"translate_template: {e}", file=sys.stderr)
            return 2
    try:
        nested = dict(nested_translations(template, source, parent_params)) if (check and not block) or nested_out else {}
    except ParameterError as e:
        print(f"translate_template: {e}", file=sys.stderr)
        return 2
    if nested_out is not None:
        for name, child in nested.items():
            (nested_out / f"translated-{name}.json").write_text(json.dumps(child, indent=2) + "\n", encoding="utf-8")
    replace_local_code_uris(template)
    translated = transform(template, {}, NoManagedPolicies())
    if check:
        missing = check_delivery_settings(translated, every_kind=not block, nested=nested) + check_logs_and_edge(translated)
        if given:
            # Each block as this variant deploys it (unresolved, --check-block checks them).
            for name, child in nested.items():
                missing += [f"{name}: {problem}" for problem in check_delivery_settings(child, every_kind=False)]
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
