"""The config file, sextant.toml: Queues and Handlers declared in TOML (`sextant config apply -f sextant.toml`).

    [queues.emails]                      # a Queue named emails
    concurrency = 10
    max_attempts = 5
    backoff = { policy = "exponential", initial = "10s", max = "10m" }
    timeout = "2m"

    [handlers.send-receipt]              # a worker-mode Handler (spec.worker) named send-receipt
    command = ["python", "-m", "receipts.send"]

    [worker]                             # `sextant worker --config sextant.toml`: its flags (no object)
    concurrency = 16
    modules = ["receipts.handlers"]

Every key is a CRD field in snake_case, one to one (`max_attempts` is Queue `spec.maxAttempts`,
`backoff.initial` is `spec.backoff.initial`); a handler's `command` is Handler `spec.worker.command` (none: an SDK
function registered under the handler's name, `spec.worker: {}`). Values are checked by the same models as the
CRDs, strictly (a TOML string is not a number). The [worker] section holds `sextant worker`'s flags, by their
names (worker_config); `config apply` leaves it alone. Pure: text in, objects or a ConfigError naming the key out.
"""

from __future__ import annotations

import tomllib
from typing import Annotated, Any, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from . import API_VERSION, handler, queue
from .common import DURATION_PATTERN, parse_duration
from .handler import HandlerSpec
from .inputs import InputError, command_env, object_name
from .queue import QueueSpec

# A handler's keys besides `command`: HandlerSpec's own, but for the pod template (pod mode is a Kubernetes pod
# spec, declared in YAML) and heartbeat (a pod's runner's lease; workers hold their own).
_HANDLER_FIELDS = ("non_retryable_exit_codes",)
SECTIONS = ("queues", "handlers", "worker")


def _command_env_entry(text: str) -> str:
    try:
        command_env("command_env", text)
    except InputError as exc:
        raise ValueError(exc.message) from None
    return text


class WorkerConfig(BaseModel):
    """[worker]: `sextant worker`'s flags by their names (a flag given on the command line wins). Without `queues`
    and `handlers` it serves the file's own [queues.*] and [handlers.*] (worker_config), not the whole namespace."""

    model_config = ConfigDict(extra="forbid", strict=True)

    queues: list[str] | None = None
    handlers: list[str] | None = None
    modules: list[str] | None = None
    concurrency: int | None = Field(default=None, ge=1)
    name: str | None = None
    drain_grace: str | None = Field(default=None, pattern=DURATION_PATTERN)
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    # true: --allow-commands (every Handler's command); a list of handler names: --allow-command for each.
    allow_commands: Any = None
    command_env: list[Annotated[str, AfterValidator(_command_env_entry)]] | None = None  # --command-env

    @field_validator("allow_commands")
    @classmethod
    def _allow_commands(cls, value: Any) -> bool | list[str] | None:
        if value is None or isinstance(value, bool):
            return value
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError("must be true, false or a list of handler names")
        for name in value:
            try:
                object_name("allow_commands", name, "handler name")
            except InputError as exc:
                raise ValueError(exc.message) from None
        return value


class ConfigError(ValueError):
    """A key of the config file is unknown or its value invalid; `key` names it (queues.emails.max_attempts)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key, self.message = key, message


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds (Backoff, Retention, also behind `X | None`), if any."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _check_keys(model: type[BaseModel], data: dict[str, Any], where: str, names: tuple[str, ...] | None = None) -> None:
    """Every key is a field of model (or one of names), by its snake_case name (camelCase is the YAML's spelling,
    not this file's)."""
    fields = model.model_fields
    names = names if names is not None else tuple(fields)
    for key, value in data.items():
        if key not in names:
            hint = next((n for n in names if n in fields and fields[n].alias == key), None)
            raise ConfigError(f"{where}.{key}", (f"write {hint!r}: keys are the CRD fields in snake_case" if hint else
                                                 f"unknown key; it takes {', '.join(names)}"))
        nested = _model_of(fields[key].annotation) if key in fields else None
        if nested is not None:
            if not isinstance(value, dict):
                raise ConfigError(f"{where}.{key}", f"must be a table of {', '.join(nested.model_fields)}")
            _check_keys(nested, value, f"{where}.{key}")


def _validated(model: type[BaseModel], data: dict[str, Any], where: str) -> Any:
    try:
        return model.model_validate(data, strict=True)
    except ValidationError as exc:
        error = exc.errors()[0]
        # The file's key for the model's field: a handler's command is spec.worker.command.
        key = where + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"] if p != "worker")
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "string_pattern_mismatch" and error["ctx"].get("pattern") == DURATION_PATTERN:
            message = _duration_problem(error["input"])
        elif error["loc"]:
            message += f" (got {error['input']!r})"
        raise ConfigError(key, message) from None


def _duration_problem(value: str) -> str:
    try:
        parse_duration(value)
    except ValueError as exc:
        return str(exc)
    return f"{value!r} is not a duration"


def _object(kind: str, name: str, namespace: str | None, spec: BaseModel) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    # Only what the file declares: a server-side apply then owns those fields alone, and the CRD's defaults fill in
    # the rest, as for a YAML manifest.
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata,
            "spec": spec.model_dump(by_alias=True, exclude_unset=True, mode="json")}


def _table(value: Any, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(key, "must be a table ([" + key + "])")
    return value


def _name(value: str, key: str) -> str:
    try:
        return object_name(key, value)
    except InputError as exc:
        raise ConfigError(key, exc.message) from None


def parse(text: str, namespace: str | None = None) -> list[dict[str, Any]]:
    """sextant.toml's text → its Queues, then its Handlers (as Kubernetes objects, in `namespace` when given).
    ConfigError names the first bad key; TOML syntax errors name the line."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("sextant.toml", f"not valid TOML: {exc}") from None
    for section in doc:
        if section not in SECTIONS:
            raise ConfigError(section, f"unknown section; the file declares [{'], ['.join(SECTIONS)}]")
    objects = []
    for name, body in _table(doc.get("queues", {}), "queues").items():
        where = f"queues.{_name(name, f'queues.{name}')}"
        _check_keys(QueueSpec, _table(body, where), where)
        objects.append(_object(queue.KIND, name, namespace, _validated(QueueSpec, body, where)))
    for name, body in _table(doc.get("handlers", {}), "handlers").items():
        where = f"handlers.{_name(name, f'handlers.{name}')}"
        body = dict(_table(body, where))
        _check_keys(HandlerSpec, body, where, names=("command", *_HANDLER_FIELDS))
        command = body.pop("command", None)
        spec = {"worker": {} if command is None else {"command": command}, **body}
        objects.append(_object(handler.KIND, name, namespace, _validated(HandlerSpec, spec, where)))
    _worker_section(doc)  # no object, but checked: `config apply` of a file the worker would refuse fails too
    return objects


def _worker_section(doc: dict[str, Any]) -> WorkerConfig:
    body = _table(doc.get("worker", {}), "worker")
    for key in body:
        if key not in WorkerConfig.model_fields:
            hint = key.replace("-", "_")
            raise ConfigError(f"worker.{key}", f"write {hint!r}: keys are the flags in snake_case"
                              if hint in WorkerConfig.model_fields else
                              f"unknown key; it takes {', '.join(WorkerConfig.model_fields)}")
    return _validated(WorkerConfig, body, "worker")


def worker_config(text: str) -> WorkerConfig:
    """sextant.toml's text → the flags of `sextant worker --config`: [worker]'s keys, and by default the queues and
    handlers the file declares. ConfigError names the first bad key (the whole file is checked as by parse, so a
    worker never starts on a file `config apply` would refuse)."""
    objects = parse(text)
    found = _worker_section(tomllib.loads(text))
    declared = {kind: [o["metadata"]["name"] for o in objects if o["kind"] == kind]
                for kind in (queue.KIND, handler.KIND)}
    return found.model_copy(update={
        "queues": found.queues if found.queues is not None else declared[queue.KIND] or None,
        "handlers": found.handlers if found.handlers is not None else declared[handler.KIND] or None})
