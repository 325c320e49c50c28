"""The worker protocol defined once (operator/sextant/resources/protocol.json): Python reads its constants, the Node
SDK's generated modules (sdk/node/src/generated/, `make crds`) are what resources/typescript.py writes from it and
from the CRDs, and Python's code gives its golden values, which sdk/node/test/common.test.js checks the Node SDK
against too: a change on either side fails the other side's tests."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from sextant import sdk
from sextant.lifecycle.attempts import RUNNER_NON_RETRYABLE
from sextant.lifecycle.idempotency import keyed_name
from sextant.resources import common, contract, inputs, job, report, typescript, worker
from sextant.resources.common import parse_duration
from sextant.resources.queue import QueueSpec
from sextant.worker import registration, settings

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = json.loads((ROOT / "operator" / "sextant" / "resources" / "protocol.json").read_text(encoding="utf-8"))
C = FIXTURE["constants"]


def test_python_reads_the_protocol_file():
    assert contract.PROTOCOL == C
    assert [report.SNOOZE_EXIT_CODE, sdk.NON_RETRYABLE_EXIT_CODE, RUNNER_NON_RETRYABLE, job.ID_ALPHABET, job.ID_LENGTH,
            common.NAME_MAX, job.PAYLOAD_MAX_BYTES, job.MAX_PAYLOAD_DEPTH, inputs.KEY_MAX, job.CONCURRENCY_KEY_MAX,
            inputs.PRIORITY_MIN, inputs.PRIORITY_MAX, job.IDEMPOTENCY_WINDOW.total_seconds(),
            report.OUTPUT_MAX_BYTES, report.PROGRESS_MESSAGE_MAX, worker.MESSAGE_MAX_LENGTH, worker.FINALIZER,
            contract.LABEL_WORKER, registration.RENEW_DEADLINE, settings.Settings("ns", "w").concurrency,
            report.SNOOZE_FILE_ENV] == [
        C["snoozeExitCode"], C["nonRetryableExitCode"], C["nonRetryableExitCode"], C["idAlphabet"], C["idLength"],
        C["nameMax"], C["payloadMaxBytes"], C["maxPayloadDepth"], C["keyMax"], C["concurrencyKeyMax"],
        C["priorityMin"], C["priorityMax"], C["idempotencyWindowHours"] * 3600, C["outputMaxBytes"],
        C["progressMessageMax"], C["messageMaxLength"], C["workerFinalizer"], C["workerLabel"], 2 / 3,
        C["workerConcurrency"], C["snoozeFileEnv"]]


@pytest.mark.parametrize("case", FIXTURE["golden"]["keyedName"], ids=lambda c: c["name"])
def test_keyed_names_are_the_golden_ones(case):
    assert keyed_name(case["namespace"], case["key"], case["generation"]) == case["name"]


def test_durations_are_read_as_the_golden_values_say():
    for case in FIXTURE["golden"]["durationSeconds"]:
        assert parse_duration(case["text"]).total_seconds() == case["seconds"], case
    for text in FIXTURE["golden"]["refusedDurations"]:
        with pytest.raises(ValueError):
            parse_duration(text)


def test_the_node_sdks_generated_modules_are_fresh():
    generated = typescript.OUTPUT_DIR
    assert generated == ROOT / "sdk" / "node" / "src" / "generated"
    on_disk = {p.name: p.read_text() for p in sorted(generated.glob("*.ts"))}
    rendered = typescript.render()
    assert sorted(on_disk) == sorted(rendered), "run `make crds` (files added or missing)"
    stale = [name for name, text in rendered.items() if on_disk[name] != text]
    assert not stale, f"stale in {generated}: {stale}; run `make crds`"


def test_the_generator_checks_what_it_writes(tmp_path):
    assert typescript.main(["--dir", str(tmp_path)]) == 0
    assert typescript.main(["--check", "--dir", str(tmp_path)]) == 0
    (tmp_path / "wire.ts").write_text("// edited\n")
    assert typescript.main(["--check", "--dir", str(tmp_path)]) == 1


def test_the_wire_types_follow_the_models():
    wire = typescript.render_wire()
    assignment = re.search(r"export interface Assignment \{\n(.*?)\n\}", wire, re.S).group(1)
    required = re.findall(r"^  (\w+): ", assignment, re.M)
    assert required == ["job", "uid", "queue", "handler", "sequence", "attempt", "incarnation", "assignedAt"]
    assert "  cancelGraceSeconds?: number;" in assignment
    assert "  results?: WorkerResult[];" in wire and "  output?: unknown;" in wire
    defaults = json.loads(re.search(r"export const QUEUE_SPEC_DEFAULTS = (\{.*?\n\}) satisfies", wire, re.S).group(1))
    queue = QueueSpec().model_dump(by_alias=True, mode="json", exclude_none=True)
    assert defaults == {k: v for k, v in queue.items() if k in defaults} and defaults["leaseDuration"] == "30s"


def test_the_protocol_file_is_package_data():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["tool"]["setuptools"]["package-data"]["sextant.resources"] == ["protocol.json"]
    assert "$(PY) -m sextant.resources.typescript" in (ROOT / "Makefile").read_text()
