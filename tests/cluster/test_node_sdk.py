"""The Node SDK (@sextant/node, sdk/node) on the real control plane with the real operator: the product docs' own
example run as written, a Python and a Node worker working together, the Node worker's start errors, and the Node
client. Workers are real `sextant-worker` processes (sdk/node/dist, built by `make node-sdk`) started in a directory
where @sextant/node is installed as npm installs a `file:` dependency (a link to the package)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness import repo_root, wait_for

from .support import JobRecorder, apply, get_json, handler, job, jobs, queue, wait_all, wait_state

SDK = repo_root() / "sdk" / "node"
BIN = SDK / "dist" / "bin" / "sextant-worker.js"
EXAMPLE = repo_root() / "examples" / "node"
# The product docs' only code (core concepts, "Chaining jobs"), which examples/node/charge-card.js must contain as is.
DOCS_EXAMPLE = """import { defineHandler } from '@sextant/node';

export default defineHandler('charge-card', async (job, ctx) => {
  const charge = await billing.charge(job.payload.orderId);

  await ctx.jobs.create({
    queue: 'emails',
    handler: 'send-receipt',
    payload: { orderId: job.payload.orderId, chargeId: charge.id },
    idempotencyKey: `receipt-${job.payload.orderId}`,
  });
});
"""


def worker_handler(name: str) -> dict[str, Any]:
    return {"apiVersion": "sextant.dev/v1alpha1", "kind": "Handler", "metadata": {"name": name},
            "spec": {"worker": {}}}


def node_app(directory: Path, files: dict[str, str] | None = None, copy: Path | None = None) -> Path:
    """A Node app directory with @sextant/node installed (node_modules/@sextant/node → sdk/node, as `npm install`
    of a file: dependency links it), its files copied from `copy` and written from `files`."""
    directory.mkdir(parents=True, exist_ok=True)
    if copy is not None:
        for item in copy.iterdir():
            if item.is_file():
                shutil.copy(item, directory / item.name)
    (directory / "package.json").write_text(json.dumps({"type": "module", "private": True}))
    (directory / "node_modules" / "@sextant").mkdir(parents=True, exist_ok=True)
    link = directory / "node_modules" / "@sextant" / "node"
    if not link.exists():
        link.symlink_to(SDK, target_is_directory=True)
    for name, text in (files or {}).items():
        (directory / name).write_text(text)
    return directory


class NodeWorker:
    """`node sextant-worker.js` as a process of its own, in its app's directory; its output in a log file."""

    def __init__(self, cluster, namespace: str, app: Path, name: str, *args: str, env: dict[str, str] | None = None):
        self.name, self.log_path = name, app / f"worker-{name}.log"
        argv = ["node", str(BIN), "--kubeconfig", str(cluster.kubeconfig), "-n", namespace, "--name", name, *args]
        self.proc = subprocess.Popen(argv, cwd=app, stdout=self.log_path.open("ab"), stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def node_workers(request):
    made: list[Any] = []
    request.node._sextant_workers = made  # their logs join a failed test's report (conftest.py)
    yield made
    for worker in made:
        worker.kill()


def live(cluster, namespace: str, name: str, worker) -> None:
    def state() -> Any:
        assert worker.proc.poll() is None, f"worker {name} exited:\n{worker.log()[-3000:]}"
        items = get_json(cluster, namespace, "workers.sextant.dev")["items"]
        return any(w["metadata"]["name"] == name and (w.get("status") or {}).get("state") == "live" for w in items)
    wait_for(state, 90, message=f"worker {name} to be live")


def attempts(name: str, cluster, namespace: str) -> list[tuple[Any, ...]]:
    st = get_json(cluster, namespace, "jobs.sextant.dev", name)["status"]
    return [(a["attempt"], a["result"], a.get("reason")) for a in st.get("attempts", [])]


# ================================================================ the docs' example
SLOW_FIRST_CHARGE = """// The test's billing: its first charge in this process takes 3 s and ignores the abort signal (a slow provider),
// so the first attempt of charge-card outlives the queue's 2 s timeout and still chains its receipt afterwards.
// A charge is idempotent per order, as a payment provider's is (a charge id per order, whichever attempt asks): a
// retry that chained a different payload under the same key would be refused (KeyConflict).
let calls = 0;
export const billing = {
  async charge(orderId) {
    calls += 1;
    if (calls === 1) await new Promise((resolve) => setTimeout(resolve, 3000));
    return { id: `ch_${orderId}` };
  },
};
"""


def test_the_docs_example_runs_as_written_and_a_repeated_attempt_chains_one_receipt(cluster, namespace, operator,
                                                                                     tmp_path, node_workers):
    assert DOCS_EXAMPLE in (EXAMPLE / "charge-card.js").read_text(), "examples/node/charge-card.js is the docs' code"
    app = node_app(tmp_path / "app", {"billing.js": SLOW_FIRST_CHARGE}, copy=EXAMPLE)
    fast = {"backoff": {"policy": "fixed", "initial": "200ms"}, "leaseDuration": "5s"}
    apply(cluster, namespace, queue("payments", timeout="2s", cancelGrace="10s", maxAttempts=3, **fast),
          queue("emails", **fast), worker_handler("charge-card"), worker_handler("send-receipt"),
          job("charge-42", queue_name="payments", handler_name="charge-card", payload={"orderId": 42}))
    worker = NodeWorker(cluster, namespace, app, "shop-node", "--module", "./charge-card.js",
                        "--module", "./send-receipt.js")
    node_workers.append(worker)

    wait_state(cluster, namespace, "charge-42", "succeeded", timeout=90)
    # Attempt 1 timed out, and chained its receipt after the timeout; attempt 2 chained it again with the same key.
    assert attempts("charge-42", cluster, namespace) == [(1, "failed", "Timeout"), (2, "succeeded", None)]
    receipts = [j for j in jobs(cluster, namespace).values() if j["spec"]["handler"] == "send-receipt"]
    assert len(receipts) == 1, [j["metadata"]["name"] for j in receipts]
    [receipt] = receipts
    assert receipt["spec"]["idempotencyKey"] == "receipt-42" and receipt["spec"]["queue"] == "emails"
    assert receipt["spec"]["payload"] == {"orderId": 42, "chargeId": "ch_42"}
    wait_state(cluster, namespace, receipt["metadata"]["name"], "succeeded", timeout=60)
    receipt_id = receipt["metadata"]["name"].replace("job-", "job_", 1)
    wait_for(lambda: f"receipt for order 42 (charge ch_42) sent by {receipt_id}, attempt 1" in worker.log(), 30,
             message=lambda: worker.log()[-2000:])
    assert worker.stop() == 0, worker.log()[-2000:]
    wait_for(lambda: not get_json(cluster, namespace, "workers.sextant.dev")["items"], 30,
             message="the drained worker's object deleted")


# ================================================================ Python and Node together
PY_HANDLERS = """import json, pathlib, time
from sextant.sdk import handler

@handler("py-start")
def start(job, ctx):
    ctx.jobs.create(queue="q", handler="node-middle", payload={"trail": ["python"]}, idempotency_key=f"mid-{job.id}")

@handler("py-end")
def end(job, ctx):
    pathlib.Path(job.payload["out"]).write_text(json.dumps(job.payload["trail"] + ["python"]))

@handler("nap")
async def nap(job, ctx):
    import asyncio
    out = pathlib.Path(job.payload["dir"])
    (out / f"{job.id}.start").write_text(f"{time.time()} python")
    await asyncio.sleep(1.5)
    (out / f"{job.id}.end").write_text(str(time.time()))
"""

NODE_HANDLERS = """import { defineHandler } from '@sextant/node';
import { writeFileSync } from 'node:fs';

defineHandler('node-middle', async (job, ctx) => {
  await ctx.jobs.create({ queue: 'q', handler: 'py-end', idempotencyKey: `end-${job.id}`,
                          payload: { trail: [...job.payload.trail, 'node'], out: process.env.TRAIL_FILE } });
});

defineHandler('nap', async (job, ctx) => {
  writeFileSync(`${job.payload.dir}/${job.id}.start`, `${Date.now() / 1000} node`);
  await new Promise((resolve) => setTimeout(resolve, 1500));
  writeFileSync(`${job.payload.dir}/${job.id}.end`, String(Date.now() / 1000));
});
"""


def python_worker(cluster, namespace: str, app: Path, name: str, *args: str) -> Any:
    log = app / f"worker-{name}.log"
    proc = subprocess.Popen([sys.executable, "-m", "sextant", "--kubeconfig", str(cluster.kubeconfig), "worker",
                             "-n", namespace, "--name", name, *args], cwd=app, stdout=log.open("ab"),
                            stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(app)})

    class Handle:
        def __init__(self) -> None:
            self.name, self.proc = name, proc

        def log(self) -> str:
            return log.read_text(errors="replace")

        def kill(self) -> None:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)

    return Handle()


def test_python_chains_to_node_and_back_and_one_queue_concurrency_holds_across_both(cluster, namespace, operator,
                                                                                     tmp_path, node_workers):
    app = node_app(tmp_path / "app", {"handlers.mjs": NODE_HANDLERS, "pyhandlers.py": PY_HANDLERS})
    trail, naps = tmp_path / "trail.json", tmp_path / "naps"
    naps.mkdir()
    apply(cluster, namespace, queue("q", concurrency=2, leaseDuration="10s",
                                    backoff={"policy": "fixed", "initial": "200ms"}),
          *(worker_handler(h) for h in ("py-start", "node-middle", "py-end", "nap")))
    node = NodeWorker(cluster, namespace, app, "w-node", "--module", "./handlers.mjs", "--concurrency", "4",
                      env={"TRAIL_FILE": str(trail)})
    node_workers.append(node)
    py = python_worker(cluster, namespace, app, "w-python", "--module", "pyhandlers", "--concurrency", "4")
    node_workers.append(py)
    live(cluster, namespace, "w-node", node)
    live(cluster, namespace, "w-python", py)

    # Python → Node → Python, each hop created by the previous handler.
    apply(cluster, namespace, job("job-start", handler_name="py-start"))
    wait_for(trail.exists, 90, message=lambda: f"the chain's end: {sorted(jobs(cluster, namespace))}")
    assert json.loads(trail.read_text()) == ["python", "node", "python"]
    chain = {j["spec"]["handler"]: j for j in jobs(cluster, namespace).values()}
    for handler_name, runner in (("py-start", "w-python"), ("node-middle", "w-node"), ("py-end", "w-python")):
        done = wait_state(cluster, namespace, chain[handler_name]["metadata"]["name"], "succeeded", timeout=60)
        assert done["attempts"][-1]["node"] == runner, (handler_name, done["attempts"])

    # One queue (concurrency 2) served by both workers (4 slots each): never more than 2 naps at once, both ran some.
    with JobRecorder(cluster.kubeconfig, namespace) as recorder:
        apply(cluster, namespace, *(job(f"nap-{i}", handler_name="nap", payload={"dir": str(naps)})
                                    for i in range(8)))
        for i in range(8):
            wait_state(cluster, namespace, f"nap-{i}", "succeeded", timeout=120)
    spans = []
    for start in naps.glob("*.start"):
        began, language = start.read_text().split()
        spans.append((float(began), float(start.with_suffix(".end").read_text()), language))
    assert len(spans) == 8
    most = max(sum(1 for b, e, _ in spans if b <= moment < e) for moment, _, _ in spans)
    assert most <= 2, sorted(spans)
    assert recorder.max_running() <= 2
    assert {language for _, _, language in spans} == {"python", "node"}, "both workers ran naps"


# ================================================================ start errors
def test_bad_input_at_start_is_an_error_naming_it_exit_2(cluster, namespace, tmp_path):
    apply(cluster, namespace, queue("q"), worker_handler("send"))
    app = node_app(tmp_path / "app", {
        "ghost.js": "import { defineHandler } from '@sextant/node';\ndefineHandler('ghost', async () => {});\n",
        "broken.js": "import { defineHandler } from '@sextant/node';\nimport './no-such-file.js';\n",
        "one.js": "import { defineHandler } from '@sextant/node';\ndefineHandler('send', async () => {});\n",
        "two.js": "import { defineHandler } from '@sextant/node';\ndefineHandler('send', async () => {});\n",
    })

    def start(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["node", str(BIN), "--kubeconfig", str(cluster.kubeconfig), "-n", namespace, *args],
                              cwd=app, capture_output=True, text=True, timeout=60)

    ghost = start("--module", "./ghost.js")
    assert ghost.returncode == 2, ghost.stderr
    assert (f"error: handler 'ghost' is defined by --module, but there is no Handler 'ghost' in namespace {namespace}"
            in ghost.stderr)
    broken = start("--module", "./broken.js")
    assert broken.returncode == 2, broken.stderr
    assert "error: --module ./broken.js does not load: Error: Cannot find module" in broken.stderr
    twice = start("--module", "./one.js", "--module", "./two.js")
    assert twice.returncode == 2, twice.stderr
    assert "error: --module ./two.js does not load: Error: handler 'send' is defined twice" in twice.stderr
    no_queue = start("--module", "./one.js", "--queue", "nope")
    assert no_queue.returncode == 2 and f"error: --queue nope: there is no Queue 'nope' in namespace {namespace}" \
        in no_queue.stderr
    assert not get_json(cluster, namespace, "workers.sextant.dev")["items"], "none of them registered"


# ================================================================ the client
CLIENT_SCRIPT = """import { Sextant } from '@sextant/node';

const sextant = new Sextant({ namespace: process.argv[2] });
const out = {};
const said = async (key, call) => {
  try { out[key] = await call(); } catch (err) { out[key] = `${err.name}: ${err.message}`; }
};
const first = await sextant.jobs.create({ queue: 'q', handler: 'h', payload: { orderId: 7 }, idempotencyKey: 'order-7' });
const again = await sextant.jobs.create({ queue: 'q', handler: 'h', payload: { orderId: 7 }, idempotencyKey: 'order-7' });
out.first = [first.id, first.created];
out.again = [again.id, again.created];
await said('conflict', () => sextant.jobs.create({ queue: 'q', handler: 'h', payload: { orderId: 8 }, idempotencyKey: 'order-7' }));
await said('tooBig', () => sextant.jobs.create({ queue: 'q', handler: 'h', payload: { blob: 'x'.repeat(300 * 1024) } }));
const later = await sextant.jobs.create({ queue: 'q', handler: 'h', runAt: new Date(Date.now() + 3600e3) });
out.later = later.id;
out.cancel = (await sextant.jobs.cancel(later.id)).object.spec.cancel;
out.get = (await sextant.jobs.get(first.id)).payload;
out.list = (await sextant.jobs.list({ handler: 'h' })).map((j) => j.id);
await said('missing', () => sextant.jobs.get('job_nothere'));
for (let i = 0; i < 600 && (await sextant.jobs.get(later.id)).state !== 'cancelled'; i++) {
  await new Promise((resolve) => setTimeout(resolve, 100));
}
await said('retry', () => sextant.jobs.retry(later.id));
console.log(JSON.stringify(out));
"""


def run_script(cluster, namespace: str, tmp_path: Path, script: str, *args: str) -> Any:
    """A Node script run in an app with @sextant/node installed (the namespace, then `args`, its arguments): what it
    printed, as JSON."""
    app = node_app(tmp_path / "-".join(("app", *args)), {"script.mjs": script})
    done = subprocess.run(["node", "script.mjs", namespace, *args], cwd=app, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_node_client_creates_reads_cancels_with_the_python_clients_rules(cluster, namespace, operator, tmp_path):
    from sextant.client import Client
    from sextant.kube import kubeconfig

    apply(cluster, namespace, queue("q"))
    out = run_script(cluster, namespace, tmp_path, CLIENT_SCRIPT)
    first = out["first"][0]
    assert out["first"] == [first, True] and out["again"] == [first, False], "the key returns the first job"
    assert out["conflict"] == (f"KeyConflict: idempotency key 'order-7' is held by job {first} with another "
                               "spec.payload ({\"orderId\":7}, not {\"orderId\":8}): a key names one job within its "
                               "window; give another job another key")
    assert out["tooBig"].startswith("InputError: payload: the payload is 307211 bytes as JSON, over the limit of "
                                    "262144 bytes (256 KiB)"), out["tooBig"]
    assert out["cancel"] is True
    wait_state(cluster, namespace, out["later"].replace("_", "-"), "cancelled", timeout=60)
    assert out["get"] == {"orderId": 7} and sorted(out["list"]) == sorted([first, out["later"]])
    assert out["missing"] == f"Refused: job job_nothere not found in namespace {namespace}"
    assert out["retry"] == (f"Refused: job {out['later']}: cannot retry: the job is cancelled; only failed or dead "
                            "jobs can be retried"), out["retry"]

    # The Python client names the same job for the same key (one rule, one keyed name).
    client = Client(kubeconfig.load(str(cluster.kubeconfig), None, None))
    try:
        held, created = client.create_job(namespace, queue="q", handler="h", payload={"orderId": 7},
                                          idempotency_key="order-7")
    finally:
        client.close()
    assert not created and held["metadata"]["name"] == first.replace("_", "-")
    assert len(jobs(cluster, namespace)) == 2, "nothing else was created"


QUEUES_SCRIPT = """import { Sextant } from '@sextant/node';

const sextant = new Sextant({ namespace: process.argv[2] });
const steps = {
  pause: async () => (await sextant.queues.pause('q')).spec.paused,
  resume: async () => (await sextant.queues.resume('q')).spec.paused,
  cancel: () => sextant.jobs.cancelMatching({ queue: 'q', state: 'queued' }),
  retry: () => sextant.jobs.retryMatching({ queue: 'once', state: 'dead' }),
  missing: () => sextant.queues.pause('nope').catch((err) => `${err.name}: ${err.message}`),
};
console.log(JSON.stringify(await steps[process.argv[3]]()));
"""


def test_the_node_client_pauses_and_resumes_a_queue_and_cancels_and_retries_what_a_filter_matches(
        cluster, namespace, operator, tmp_path):
    apply(cluster, namespace, queue("q", concurrency=1), handler("h"),
          queue("once", maxAttempts=1), handler("fails", annotations={"sextant.dev/test-exit-code": "3"}),
          *(job(f"job-dead-{i}", "once", "fails") for i in range(2)))
    assert run_script(cluster, namespace, tmp_path, QUEUES_SCRIPT, "pause") is True

    def paused() -> bool | None:
        return (get_json(cluster, namespace, "queues.sextant.dev", "q").get("status") or {}).get("paused")

    wait_for(lambda: paused() is True, 20, message="the operator to say q is paused")
    apply(cluster, namespace, *(job(f"job-held-{i}") for i in range(3)))
    for i in range(3):  # jobs keep arriving, queued; nothing starts
        wait_state(cluster, namespace, f"job-held-{i}", "queued", timeout=30)
    assert not get_json(cluster, namespace, "pods", "-l", "sextant.dev/queue=q")["items"]
    cancelled = run_script(cluster, namespace, tmp_path, QUEUES_SCRIPT, "cancel")
    assert cancelled == {"requested": [f"job_held-{i}" for i in range(3)], "refused": []}, cancelled
    for i in range(3):
        wait_state(cluster, namespace, f"job-held-{i}", "cancelled", timeout=30)
    assert run_script(cluster, namespace, tmp_path, QUEUES_SCRIPT, "resume") is False
    wait_for(lambda: paused() is False, 20, message="the operator to say q is resumed")

    wait_all(cluster, namespace, 5, {"dead", "cancelled"}, 60)
    retried = run_script(cluster, namespace, tmp_path, QUEUES_SCRIPT, "retry")
    assert sorted(retried["requested"]) == ["job_dead-0", "job_dead-1"] and retried["refused"] == [], retried
    for i in range(2):  # each runs again from attempt 1: a second pod, and dead again
        wait_for(lambda: len(get_json(cluster, namespace, "pods", "-l", f"sextant.dev/job=job-dead-{i}")["items"])
                 == 2, 60, message=f"job-dead-{i}'s second attempt pod")
    assert run_script(cluster, namespace, tmp_path, QUEUES_SCRIPT, "missing") == \
        f"Refused: queue nope not found in namespace {namespace}"


MANY_SCRIPT = """import { Sextant } from '@sextant/node';

const sextant = new Sextant({ namespace: process.argv[2] });
const keyed = await sextant.jobs.create({ queue: 'q', handler: 'h', concurrencyKey: 'tenant-a' });
const results = await sextant.jobs.createMany([
  { queue: 'q', handler: 'h', payload: { n: 1 }, idempotencyKey: 'many-1', concurrencyKey: 'tenant-b' },
  { queue: 'q', handler: 'h', payload: { n: 1 }, idempotencyKey: 'many-1' },
  { queue: 'q', handler: 'h', payload: { n: 2 }, idempotencyKey: 'many-1' },
  { queue: 'q', handler: 'h', payload: { n: 3 } },
]);
let invalid;
try { await sextant.jobs.createMany([{ queue: 'q', handler: 'h' }, { queue: 'q', handler: 'h', concurrencyKey: '' }]); }
catch (err) { invalid = `${err.name}: ${err.message}`; }
console.log(JSON.stringify({ keyed: keyed.id, keyedSpec: keyed.object.spec.concurrencyKey, invalid,
  results: results.map((r) => ({ id: r.id ?? null, created: r.created, status: r.status, error: r.error ? r.error.name : null })) }));
"""


def test_the_node_client_sets_a_concurrency_key_and_creates_many(cluster, namespace, operator, tmp_path):
    apply(cluster, namespace, queue("q"))
    out = run_script(cluster, namespace, tmp_path, MANY_SCRIPT)
    stored = get_json(cluster, namespace, "jobs.sextant.dev", out["keyed"].replace("_", "-"))
    assert stored["spec"]["concurrencyKey"] == "tenant-a" == out["keyedSpec"]
    first, again, conflict, plain = out["results"]
    assert first["created"] is True and first["status"] == 201 and first["error"] is None
    assert again == {"id": first["id"], "created": False, "status": 200, "error": None}, "a repeat of its key returns it"
    assert conflict["status"] == 409 and conflict["error"] == "KeyConflict" and conflict["id"] is None
    assert plain["created"] is True and plain["status"] == 201
    assert get_json(cluster, namespace, "jobs.sextant.dev", first["id"].replace("_", "-"))["spec"]["concurrencyKey"] \
        == "tenant-b"
    assert out["invalid"] == "InputError: jobs[1].concurrencyKey: a concurrency key must not be empty"
    assert len(jobs(cluster, namespace)) == 3, "the invalid batch created nothing"


# ================================================================ output
OUTPUT_HANDLERS = """import { defineHandler } from '@sextant/node';

defineHandler('node-producer', async (job, ctx) => {
  await ctx.jobs.create({ queue: 'q', handler: 'node-consumer', payload: { from: job.id }, idempotencyKey: `c-${job.id}` });
  return { rows: 3, by: job.id };
});

defineHandler('node-consumer', async (job, ctx) => {
  for (let i = 0; i < 300; i++) {
    const got = await ctx.jobs.output(job.payload.from);
    if (got !== undefined) return { got, state: (await ctx.jobs.get(job.payload.from)).state };
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error('no output');
});

defineHandler('node-huge', async () => ({ blob: 'x'.repeat(40000) }));
"""


def test_a_node_handlers_return_value_is_its_output_read_by_a_chained_job(cluster, namespace, operator, tmp_path,
                                                                           node_workers):
    from .plugin_support import ok, sextant

    app = node_app(tmp_path / "app", {"handlers.mjs": OUTPUT_HANDLERS})
    apply(cluster, namespace, queue("q", maxAttempts=1),
          *(worker_handler(h) for h in ("node-producer", "node-consumer", "node-huge")))
    worker = NodeWorker(cluster, namespace, app, "w-out", "--module", "./handlers.mjs", "--concurrency", "2")
    node_workers.append(worker)
    live(cluster, namespace, "w-out", worker)
    apply(cluster, namespace, job("job-producer", handler_name="node-producer"),
          job("job-huge", handler_name="node-huge"))
    produced = wait_state(cluster, namespace, "job-producer", "succeeded", timeout=90)
    assert produced["output"] == {"rows": 3, "by": "job_producer"}
    consumer = next(n for n, j in jobs(cluster, namespace).items() if j["spec"]["handler"] == "node-consumer")
    consumed = wait_state(cluster, namespace, consumer, "succeeded", timeout=90)
    assert consumed["output"] == {"got": {"rows": 3, "by": "job_producer"}, "state": "succeeded"}
    huge = wait_state(cluster, namespace, "job-huge", "succeeded", timeout=90)
    assert "output" not in huge
    assert huge["outputNote"] == "the output is 40011 bytes as JSON, over the cap of 32768 bytes; not kept"
    shown = ok(sextant(cluster, "inspect", "job_producer", "-n", namespace))
    line = next(line for line in shown.splitlines() if line.startswith("Output:"))
    assert json.loads(line.removeprefix("Output:")) == {"rows": 3, "by": "job_producer"}


# ================================================================ snooze
SNOOZE_HANDLERS = """import { defineHandler, Snooze } from '@sextant/node';
import { existsSync, writeFileSync } from 'node:fs';

defineHandler('node-snoozer', async (job, ctx) => {
  const marker = `${job.payload.dir}/${job.id}.snoozed`;
  if (!existsSync(marker)) {
    writeFileSync(marker, '');
    if (job.payload.thrown) throw new Snooze(1);
    ctx.snooze('1s');
  }
  return { ran: 'after the snooze', attempt: job.attempt };
});
"""


def test_a_node_worker_snoozes_functions_and_commands_without_counting_the_attempt(cluster, namespace, operator,
                                                                                   tmp_path, node_workers):
    from .test_report import FAST, assert_snoozed_once, snooze_then_output

    app = node_app(tmp_path / "app", {"handlers.mjs": SNOOZE_HANDLERS})
    apply(cluster, namespace, queue("q", maxAttempts=1, **FAST), worker_handler("node-snoozer"),
          {**worker_handler("cmd"), "spec": {"worker": {"command": ["sh", "-c", snooze_then_output(
              tmp_path / "cmd.snoozed")]}}})
    worker = NodeWorker(cluster, namespace, app, "w-snooze", "--module", "./handlers.mjs", "--allow-command", "cmd",
                        "--concurrency", "3")
    node_workers.append(worker)
    live(cluster, namespace, "w-snooze", worker)
    apply(cluster, namespace, job("job-called", handler_name="node-snoozer", payload={"dir": str(tmp_path)}),
          job("job-thrown", handler_name="node-snoozer", payload={"dir": str(tmp_path), "thrown": True}),
          job("job-cmd", handler_name="cmd"))
    for name in ("job-called", "job-thrown"):
        final = wait_state(cluster, namespace, name, "succeeded", "dead", timeout=60)
        assert_snoozed_once(final)  # maxAttempts 1: a counted snooze would have ended it dead
        assert final["output"] == {"ran": "after the snooze", "attempt": 1}
    cmd = wait_state(cluster, namespace, "job-cmd", "succeeded", "dead", timeout=60)
    assert_snoozed_once(cmd)
    assert cmd["output"] == {"rows": 2}


# ================================================================ progress
PROGRESS_HANDLERS = """import { defineHandler } from '@sextant/node';
import { existsSync } from 'node:fs';

defineHandler('node-progresser', async (job, ctx) => {
  ctx.progress(0.4, 'resized 4/10');
  while (!existsSync(job.payload.until)) await new Promise((resolve) => setTimeout(resolve, 100));
  return { done: true };
});
"""


def test_a_node_workers_progress_shows_while_it_runs(cluster, namespace, operator, tmp_path, node_workers):
    from .test_report import FAST, progress_seen

    until = tmp_path / "go"
    app = node_app(tmp_path / "app", {"handlers.mjs": PROGRESS_HANDLERS})
    apply(cluster, namespace, queue("q", maxAttempts=1, **FAST), worker_handler("node-progresser"),
          {**worker_handler("cmd"), "spec": {"worker": {"command": ["sh", "-c",
              f'echo "0.7 seven of ten" > "$SEXTANT_PROGRESS_FILE"; while [ ! -e {until} ]; do sleep 0.1; done']}}})
    worker = NodeWorker(cluster, namespace, app, "w-progress", "--module", "./handlers.mjs", "--allow-command",
                        "cmd", "--concurrency", "2")
    node_workers.append(worker)
    live(cluster, namespace, "w-progress", worker)
    apply(cluster, namespace, job("job-fn", handler_name="node-progresser", payload={"until": str(until)}),
          job("job-cmd", handler_name="cmd"))
    progress_seen(cluster, namespace, "job-fn", 0.4, "resized 4/10")
    progress_seen(cluster, namespace, "job-cmd", 0.7, "seven of ten")
    until.touch()
    for name in ("job-fn", "job-cmd"):
        assert wait_state(cluster, namespace, name, "succeeded", timeout=60)["state"] == "succeeded"


# ================================================================ examples/node, as the README runs it
def test_the_node_example_runs_as_the_readme_says(cluster, namespace, operator, tmp_path, node_workers):
    """README "Node": the example's objects applied, `npm run worker` (its script: sextant-worker with the example's
    two modules) in one terminal, `node enqueue.js 42` twice in another: one charge, one receipt, the second create
    answered with the first job."""
    cluster.kubectl("apply", "-n", namespace, "-f", str(EXAMPLE / "objects.yaml"))
    app = node_app(tmp_path / "example", copy=EXAMPLE)
    script = json.loads((EXAMPLE / "package.json").read_text())["scripts"]["worker"].split()
    assert script[0] == "sextant-worker"
    worker = NodeWorker(cluster, namespace, app, "example", *script[1:])
    node_workers.append(worker)
    # enqueue.js uses the kubeconfig's namespace, as `kubectl config set-context --current --namespace` sets it.
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    for context in config["contexts"]:
        context["context"]["namespace"] = namespace
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    said = [subprocess.run(["node", "enqueue.js", "42"], cwd=app, env=env, capture_output=True, text=True,
                           timeout=120) for _ in range(2)]
    assert all(s.returncode == 0 for s in said), [s.stderr for s in said]
    first, second = (s.stdout.strip() for s in said)
    assert first.startswith("created job_") and second.startswith(f"already there: {first.split()[1]}")
    charge = first.split()[1].replace("_", "-")
    wait_state(cluster, namespace, charge, "succeeded", timeout=90)
    receipts = [j for j in jobs(cluster, namespace).values() if j["spec"]["handler"] == "send-receipt"]
    assert len(receipts) == 1 and len(jobs(cluster, namespace)) == 2
    wait_state(cluster, namespace, receipts[0]["metadata"]["name"], "succeeded", timeout=60)
    wait_for(lambda: "receipt for order 42 (charge ch_42_" in worker.log(), 30, message=lambda: worker.log()[-2000:])
    assert worker.stop() == 0, worker.log()[-2000:]


# ================================================================ createWorker: a worker in your own program
EMBEDDED = """import { createWorker, defineHandler } from '@sextant/node';

let worker;
const greet = defineHandler('greet', async (job) => {
  console.log(`hello, ${job.payload.name} (${job.id}, attempt ${job.attempt}, queue ${job.queue})`);
  setTimeout(() => worker.stop(), 100);  // the app decides when its worker ends: a drain, as SIGTERM does
});
worker = createWorker({ handlers: [greet], queues: ['q'], concurrency: 2, namespace: process.argv[2], name: 'embedded' });
await worker.run();
console.log('drained');
"""


def test_create_worker_serves_inside_a_program_until_it_stops_it(cluster, namespace, operator, tmp_path):
    apply(cluster, namespace, queue("q"), worker_handler("greet"),
          job("job-hi", handler_name="greet", payload={"name": "node"}))
    app = node_app(tmp_path / "app", {"main.mjs": EMBEDDED})
    done = subprocess.run(["node", "main.mjs", namespace], cwd=app, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hello, node (job_hi, attempt 1, queue q)" in done.stdout and done.stdout.rstrip().endswith("drained")
    final = wait_state(cluster, namespace, "job-hi", "succeeded", timeout=30)
    assert final["attempts"][0]["node"] == "embedded"
    assert not get_json(cluster, namespace, "workers.sextant.dev")["items"], "its Worker object went with the drain"
