"""Validate rendered Prometheus Operator objects (monitoring.coreos.com) against the
operator's API, strictly: usage `monitoring_crds.py [--rules-out DIR] RENDERED.yaml ...`.

kubernetes-validate knows only Kubernetes' own kinds. For the operator's, this uses the
pydantic models that cloudcoil-models-prometheus-operator generates from the operator's
CRDs (scripts/validate-deploy runs it with uvx at a pinned version, outside uv.lock). The
models check types and required fields but ignore unknown ones, so every key of the
object is also looked up in the model it is validated against, the way
`kubectl apply --validate=strict` refuses a misspelt field. Objects of other groups are
skipped; exits 1 on any problem, printing each.

`--rules-out DIR` also writes each PrometheusRule's `spec` (a Prometheus rule file) to
`DIR/<rendered file's stem>/<rule's name>.rules.yaml`, for promtool.
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path
from typing import Any

import pydantic
import yaml
from cloudcoil.models.prometheus_operator import v1

GROUP = "monitoring.coreos.com/"
MODELS: dict[str, type[pydantic.BaseModel]] = {
    "ServiceMonitor": v1.ServiceMonitor,
    "PodMonitor": v1.PodMonitor,
    "PrometheusRule": v1.PrometheusRule,
}


def _models_in(annotation: Any) -> list[Any]:
    """The model classes, lists and dicts an annotation allows (Optional, unions and
    Annotated unwrapped)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    if annotation is type(None):
        return []
    return [annotation]


def unknown_fields(model: Any, data: Any, path: str) -> list[str]:
    """Paths of keys in `data` that `model` (an annotation) does not declare."""
    found: list[str] = []
    for candidate in _models_in(model):
        origin = typing.get_origin(candidate)
        if origin is list and isinstance(data, list):
            (item,) = typing.get_args(candidate) or (Any,)
            for index, element in enumerate(data):
                found += unknown_fields(item, element, f"{path}[{index}]")
            return found
        if origin is dict and isinstance(data, dict):
            args = typing.get_args(candidate)
            value_type = args[1] if len(args) == 2 else Any
            for key, element in data.items():
                found += unknown_fields(value_type, element, f"{path}.{key}")
            return found
        if (
            isinstance(candidate, type)
            and issubclass(candidate, pydantic.BaseModel)
            and not issubclass(candidate, pydantic.RootModel)
            and isinstance(data, dict)
        ):
            by_key = {
                (field.alias or name): field for name, field in candidate.model_fields.items()
            }
            by_key.update(candidate.model_fields)
            for key, element in data.items():
                field = by_key.get(key)
                if field is None:
                    found.append(f"{path}.{key}")
                else:
                    found += unknown_fields(field.annotation, element, f"{path}.{key}")
            return found
    return found


def check(obj: dict[str, Any]) -> list[str]:
    kind = obj.get("kind")
    name = (obj.get("metadata") or {}).get("name", "?")
    where = f"{kind}/{name}"
    model = MODELS.get(str(kind))
    if model is None:
        return [f"{where}: no schema for kind {kind} of {obj.get('apiVersion')}"]
    problems = []
    try:
        model.model_validate(obj)
    except pydantic.ValidationError as exc:
        for error in exc.errors():
            location = ".".join(str(part) for part in error["loc"])
            problems.append(f"{where}: {location}: {error['msg']}")
    problems += [f"{where}: unknown field {p}" for p in unknown_fields(model, obj, "")]
    return problems


def main(argv: list[str]) -> int:
    rules_out: Path | None = None
    if argv[:1] == ["--rules-out"]:
        rules_out, argv = Path(argv[1]), argv[2:]
    checked = 0
    problems: list[str] = []
    for path in argv:
        for obj in yaml.safe_load_all(Path(path).read_text(encoding="utf-8")):
            if isinstance(obj, dict) and str(obj.get("apiVersion", "")).startswith(GROUP):
                checked += 1
                problems += check(obj)
                if rules_out is not None and obj.get("kind") == "PrometheusRule":
                    target = rules_out / Path(path).stem / f"{obj['metadata']['name']}.rules.yaml"
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(yaml.safe_dump(obj["spec"], sort_keys=False), "utf-8")
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    print(f"{checked} monitoring.coreos.com objects, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
