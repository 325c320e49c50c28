"""sextant.toml (resources/config.py): the docs' TOML becomes Queues and worker-mode Handlers whose fields are its
snake_case keys one to one; a bad key or value is an error naming the key."""

from __future__ import annotations

import pytest

from sextant.resources import config
from sextant.resources.handler import Handler
from sextant.resources.queue import Queue, QueueSpec

DOCS = """
[queues.emails]
concurrency = 10
max_attempts = 5
backoff = { policy = "exponential", initial = "10s", factor = 3, max = "10m", jitter = 0.2 }
timeout = "2m"
start_timeout = "5m"
lease_duration = "20s"
cancel_grace = "5s"
retention = { succeeded = "1h", dead = "72h", pods = "10m" }

[handlers.send-receipt]
command = ["python", "-m", "receipts.send"]
non_retryable_exit_codes = [2]

[handlers.charge-card]
"""


def test_the_docs_toml_becomes_a_queue_and_worker_mode_handlers():
    queue, receipt, charge = config.parse(DOCS, "shop")
    assert queue == {
        "apiVersion": "sextant.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "emails", "namespace": "shop"},
        "spec": {"concurrency": 10, "maxAttempts": 5,
                 "backoff": {"policy": "exponential", "initial": "10s", "factor": 3.0, "max": "10m", "jitter": 0.2},
                 "timeout": "2m", "startTimeout": "5m", "leaseDuration": "20s", "cancelGrace": "5s",
                 "retention": {"succeeded": "1h", "dead": "72h", "pods": "10m"}}}
    assert receipt["kind"] == "Handler" and receipt["metadata"]["name"] == "send-receipt"
    assert receipt["spec"] == {"worker": {"command": ["python", "-m", "receipts.send"]}, "nonRetryableExitCodes": [2]}
    assert charge["spec"] == {"worker": {}}  # no command: an SDK function registered under its name
    # What the file leaves out is left to the CRD's defaults, as in a YAML manifest; the models read it all back.
    assert Queue.model_validate(queue).spec.backoff.factor == 3.0
    assert Handler.model_validate(receipt).spec.on_workers


def test_every_queue_field_has_its_snake_case_key():
    """One to one: each field of the Queue CRD's spec is a key of the file (the README's table lists them)."""
    for name, field in QueueSpec.model_fields.items():
        (queue,) = config.parse(f"[queues.e]\n{name} = {_sample(name)}\n")
        assert field.alias in queue["spec"], name


def _sample(name: str) -> str:
    return {"concurrency": "3", "max_attempts": "3", "backoff": "{ policy = \"fixed\" }",
            "retention": "{ dead = \"1h\" }", "paused": "true", "rate_limit": "{ starts = 100, per = \"1m\" }",
            "per_key_concurrency": "2"}.get(name, "\"30s\"")


@pytest.mark.parametrize("text,key,words", [
    ("[queues.e]\nmaxAttempts = 3", "queues.e.maxAttempts", "write 'max_attempts'"),
    ("[queues.e]\nmax_attempts = 3000", "queues.e.max_attempts", "less than or equal to 1000"),
    ("[queues.e]\nconcurrency = \"10\"", "queues.e.concurrency", "valid integer"),
    ("[queues.e]\nconcurrency = 0", "queues.e.concurrency", "greater than or equal to 1"),
    ("[queues.e]\ntimeout = \"5 minutes\"", "queues.e.timeout", "is not a duration"),
    ("[queues.e]\ntimeout = \"0s\"", "queues.e.timeout", "at least 1ms"),
    ("[queues.e]\nbackoff = { policy = \"linear\" }", "queues.e.backoff.policy", "'exponential' or 'fixed'"),
    ("[queues.e]\nbackoff = { delay = \"1s\" }", "queues.e.backoff.delay", "unknown key"),
    ("[queues.e]\nbackoff = \"10s\"", "queues.e.backoff", "must be a table"),
    ("[queues.e]\nretention = { pods = \"1d\" }", "queues.e.retention.pods", "is not a duration"),
    ("[queues.e]\npriority = 1", "queues.e.priority", "unknown key"),
    ("[queues.Emails]", "queues.Emails", "not a valid name"),
    ("[queues]\nemails = 1", "queues.emails", "must be a table"),
    ("[handlers.h]\ncommand = \"ls\"", "handlers.h.command", "valid list"),
    ("[handlers.h]\ncommand = []", "handlers.h.command", "at least 1 item"),
    ("[handlers.h]\nimage = \"x\"", "handlers.h.image", "unknown key"),
    ("[handlers.h]\nnon_retryable_exit_codes = [\"2\"]", "handlers.h.non_retryable_exit_codes[0]", "valid integer"),
    ("[workers.w]", "workers", "unknown section"),
    ("[queues.e\n", "sextant.toml", "not valid TOML"),
])
def test_a_bad_key_or_value_is_an_error_naming_the_key(text, key, words):
    with pytest.raises(config.ConfigError) as err:
        config.parse(text, "shop")
    assert err.value.key == key and words in str(err.value), str(err.value)
    assert str(err.value).startswith(f"{key}: ")


def test_no_namespace_leaves_it_to_kubectl():
    (queue,) = config.parse("[queues.e]\n", None)
    assert queue["metadata"] == {"name": "e"} and queue["spec"] == {}


def test_the_readmes_toml_parses_and_its_table_names_every_key():
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block, worker = re.findall(r"```toml\n(.*?)```", readme, re.S)
    kinds = [(o["kind"], o["metadata"]["name"]) for o in config.parse(block, "shop")]
    assert kinds == [("Queue", "emails"), ("Handler", "send-receipt")]
    found = config.worker_config(block + worker)
    assert (found.queues, found.concurrency, found.modules) == (["emails"], 16, ["receipts.handlers"])
    listed = re.search(r"flags: (.*)\n", worker).group(1)
    assert listed.split(", ") == list(config.WorkerConfig.model_fields), "the README names every [worker] key"
    table = readme[readme.index("| sextant.toml |"):]
    table = table[:table.index("\n\n")]
    for name, field in QueueSpec.model_fields.items():
        assert f"`{name}" in table or f", {name}" in table or f"{{ {name}" in table, name
        assert field.alias in table, field.alias
    for nested in ("Backoff", "Retention"):
        model = QueueSpec.model_fields[nested.lower()].annotation
        assert all(sub in table for sub in model.model_fields), nested


def test_the_worker_section_is_the_workers_flags_and_no_object():
    text = DOCS + "\n[worker]\nconcurrency = 4\nmodules = [\"receipts.handlers\"]\n"
    assert [o["kind"] for o in config.parse(text)] == ["Queue", "Handler", "Handler"]
    found = config.worker_config(text)
    assert (found.queues, found.handlers) == (["emails"], ["send-receipt", "charge-card"])
    assert (found.concurrency, found.modules, found.name) == (4, ["receipts.handlers"], None)
    assert config.worker_config("[worker]\nqueues = [\"other\"]\n").queues == ["other"]
    assert config.worker_config("").queues is None, "no queue declared: every Queue of the namespace"
    with pytest.raises(config.ConfigError, match="worker.slots: unknown key"):
        config.parse("[worker]\nslots = 3\n")  # config apply refuses what the worker would
