"""A template as CloudFormation would deploy it with given parameter values, for the template
checks of a variant (scripts/check-template checks the sample with EventBusType=Custom):

    from resolve_parameters import resolve
    resolved = resolve(template, {"EventBusType": "Custom"}, "template.yaml")

Every condition that the parameters decide is evaluated (Fn::Equals, Fn::Not, Fn::And, Fn::Or,
Condition); a resource or output whose condition is false is removed, every Fn::If on a decided
condition is replaced by its branch (AWS::NoValue removes the key), and conditions nothing uses
any more are removed (cfn-lint warns about unused conditions). A parameter's value is the one
given, else its Default; a resource's name or ARN (Ref, Fn::GetAtt) is unknown but never empty,
as CloudFormation's are. A condition that depends on an unknown value stays as it is. Given
values become the parameters' Defaults (so that cfn-lint checks them where they are used); a
parameter given an unknown value loses its Default.
"""
import copy

UNKNOWN = object()  # known only when the stack runs: a resource's name or ARN, never empty
CONDITION_FUNCTIONS = ("Fn::Equals", "Fn::Not", "Fn::And", "Fn::Or", "Condition")


class ParameterError(Exception):
    """A given parameter the template does not declare."""


def _text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    return value if isinstance(value, str) else None


def _value(expr, params, decide):
    """The value of `expr` (a string, UNKNOWN, or None when it cannot be told)."""
    text = _text(expr)
    if text is not None:
        return text
    if not isinstance(expr, dict) or len(expr) != 1:
        return None
    (name, arg), = expr.items()
    if name == "Ref":
        if arg in params:
            return params[arg]
        return None if str(arg).startswith("AWS::") else UNKNOWN
    if name == "Fn::GetAtt":
        return UNKNOWN
    if name == "Fn::Join" and isinstance(arg, list) and len(arg) == 2 and isinstance(arg[0], str):
        items = arg[1]
        if isinstance(items, dict):  # a CommaDelimitedList parameter, or a function of one
            items = _value(items, params, decide)
            if not isinstance(items, str):
                return items
            items = items.split(",") if items else []
        values = [_value(v, params, decide) for v in items]
        if any(v is None for v in values):
            return None
        return UNKNOWN if any(v is UNKNOWN for v in values) else arg[0].join(values)
    if name in ("Fn::Sub", "Fn::Select", "Fn::Split", "Fn::ImportValue", "Fn::FindInMap"):
        return UNKNOWN  # a name or an ARN made of others: told when the stack runs
    if name == "Fn::If" and isinstance(arg, list) and len(arg) == 3:
        chosen = decide(arg[0])
        return None if chosen is None else _value(arg[1] if chosen else arg[2], params, decide)
    return None


def _evaluate(expr, params, decide):
    """True, False, or None (not decided by the parameters)."""
    if not isinstance(expr, dict) or len(expr) != 1:
        return None
    (name, arg), = expr.items()
    if name == "Condition":
        return decide(arg)
    if name == "Fn::Equals":
        a, b = (_value(v, params, decide) for v in arg)
        if isinstance(a, str) and isinstance(b, str):
            return a == b
        if (a is UNKNOWN and b == "") or (b is UNKNOWN and a == ""):
            return False
        return None
    items = [_evaluate(v, params, decide) for v in arg]
    if name == "Fn::Not":
        return None if items[0] is None else not items[0]
    if name == "Fn::And":
        return False if False in items else (None if None in items else True)
    if name == "Fn::Or":
        return True if True in items else (None if None in items else False)
    return None


def _prune(node, decided):
    """`node` with every decided Fn::If replaced by its branch; NOVALUE where AWS::NoValue."""
    if isinstance(node, list):
        out = [_prune(v, decided) for v in node]
        return [v for v in out if v is not _NOVALUE]
    if isinstance(node, dict):
        if len(node) == 1 and node.get("Ref") == "AWS::NoValue":
            return _NOVALUE
        if len(node) == 1 and "Fn::If" in node and isinstance(node["Fn::If"], list) and decided.get(node["Fn::If"][0]) is not None:
            name, yes, no = node["Fn::If"]
            return _prune(yes if decided[name] else no, decided)
        out = {k: _prune(v, decided) for k, v in node.items()}
        return {k: v for k, v in out.items() if v is not _NOVALUE}
    return node


_NOVALUE = object()


def _used_conditions(node, out):
    if isinstance(node, list):
        for v in node:
            _used_conditions(v, out)
    elif isinstance(node, dict):
        for k, v in node.items():
            if k == "Condition" and isinstance(v, str):
                out.add(v)
            elif k == "Fn::If" and isinstance(v, list) and v and isinstance(v[0], str):
                out.add(v[0])
            _used_conditions(v, out)


def parameter_values(template, given, source="the template"):
    """The template's parameter values: `given` (name -> string or UNKNOWN), else the Defaults.

    Raises ParameterError for a given name the template does not declare."""
    declared = template.get("Parameters", {})
    for name in given:
        if name not in declared:
            raise ParameterError(f"{source}: {name} is not a parameter of the template")
    params = {}
    for name, declaration in declared.items():
        if name in given:
            params[name] = given[name]
        elif "Default" in declaration:
            params[name] = _text(declaration["Default"])
    return params


def resolve(template, given, source="the template"):
    """`template` (parsed) deployed with the parameter values `given` (name -> string or
    UNKNOWN); a copy."""
    template = copy.deepcopy(template)
    declared = template.get("Parameters", {})
    params = parameter_values(template, given, source)
    definitions = template.get("Conditions", {})
    decided = {}

    def decide(name):
        if name not in decided:
            decided[name] = None  # a cycle decides nothing
            decided[name] = _evaluate(definitions.get(name), params, decide)
        return decided[name]

    for name in definitions:
        decide(name)
    for section in ("Resources", "Outputs"):
        entries = template.get(section, {})
        for key in [k for k, v in entries.items() if isinstance(v, dict) and decided.get(v.get("Condition")) is False]:
            del entries[key]
        for entry in entries.values():
            if isinstance(entry, dict) and decided.get(entry.get("Condition")) is True:
                del entry["Condition"]  # always there
    for section in ("Resources", "Outputs"):
        if section in template:
            template[section] = _prune(template[section], decided)
    # Conditions nothing refers to any more (resources, outputs, other conditions) go.
    while True:
        used = set()
        _used_conditions({k: v for k, v in template.items() if k != "Conditions"}, used)
        _used_conditions(template.get("Conditions", {}), used)
        unused = [name for name in template.get("Conditions", {}) if name not in used]
        if not unused:
            break
        for name in unused:
            del template["Conditions"][name]
    if template.get("Conditions") == {}:
        del template["Conditions"]
    for name, value in given.items():
        if value is UNKNOWN:
            declared[name].pop("Default", None)
        elif declared[name].get("Type") == "Number":
            declared[name]["Default"] = float(value) if "." in value else int(value)
        else:
            declared[name]["Default"] = value
    # Parameters only removed resources used go too (cfn-lint warns about unused parameters).
    used = set()
    _refs({k: v for k, v in template.items() if k != "Parameters"}, used)
    for name in [n for n in declared if n not in used]:
        del declared[name]
    return template


def _refs(node, out):
    """The names `node` refers to: Ref, and ${Name} in Fn::Sub."""
    if isinstance(node, list):
        for v in node:
            _refs(v, out)
    elif isinstance(node, dict):
        for k, v in node.items():
            if k == "Ref" and isinstance(v, str):
                out.add(v)
            elif k == "Fn::Sub":
                text = v[0] if isinstance(v, list) and v else v
                if isinstance(text, str):
                    out.update(part.split("}")[0].split(".")[0] for part in text.split("${")[1:])
            _refs(v, out)


def nested_parameters(resource, parent_params):
    """The parameter values an AWS::Serverless::Application `resource` of a resolved parent
    (whose parameter values are `parent_params`) gives its template: strings where they are
    known, UNKNOWN for a resource's name or ARN; values that cannot be told are left out."""
    out = {}
    for name, expr in resource.get("Properties", {}).get("Parameters", {}).items():
        value = _value(expr, parent_params, lambda _c: None)
        if value is not None:
            out[name] = value
    return out
