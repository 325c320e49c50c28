import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Sextant, InputError } from '../dist/index.js';
import { differences, firstUses, holder, writtenStatus } from '../dist/client.js';

function offline() {
  const dir = mkdtempSync(join(tmpdir(), 'sextant-client-'));
  const file = join(dir, 'kubeconfig');
  writeFileSync(file, 'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]\nusers: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u, namespace: shop}}]\ncurrent-context: x\n');
  return new Sextant({ kubeconfig: file });
}

test('the namespace comes from the kubeconfig context unless given', () => {
  assert.equal(offline().namespace, 'shop');
  assert.throws(() => new Sextant({ namespace: 'Not Valid' }), /namespace: 'Not Valid' is not a valid namespace/);
});

test('bad input is refused naming the option, before anything is sent', async () => {
  const { jobs } = offline();
  const refused = (options, re) => assert.rejects(jobs.create(options), (e) => e instanceof InputError && re.test(e.message));
  await refused({ queue: 'Emails', handler: 'h' }, /^queue: 'Emails' is not a valid queue name/);
  await refused({ queue: 'q' }, /^handler: a handler name is required/);
  await refused({ queue: 'q', handler: 'h', payload: [1] }, /^payload: the payload must be a JSON object/);
  await refused({ queue: 'q', handler: 'h', payload: { x: 'y'.repeat(300 * 1024) } }, /^payload: the payload is \d+ bytes as JSON, over the limit of 262144 bytes/);
  await refused({ queue: 'q', handler: 'h', idempotencyKey: '' }, /^idempotencyKey: an idempotency key must not be empty/);
  await refused({ queue: 'q', handler: 'h', idempotencyKey: 'k'.repeat(254) }, /^idempotencyKey: an idempotency key has at most 253 characters, got 254/);
  await refused({ queue: 'q', handler: 'h', priority: 1.5 }, /^priority: the priority must be an integer/);
  await refused({ queue: 'q', handler: 'h', runAt: '2026-12-01T10:00:00' }, /^runAt: .* is not a time/);
  await assert.rejects(jobs.get('Bad Id'), /^InputError: id: 'Bad Id' is not a job id/);
  await assert.rejects(jobs.list({ state: 'done' }), /state: 'done' is not a state; use one of scheduled, queued/);
});

test('a bulk action names what it acts on, in a state it applies to, before anything is sent', async () => {
  const { jobs, queues } = offline();
  await assert.rejects(jobs.cancelMatching({}), /^InputError: queue: name what to cancel: at least one of queue, state or handler/);
  await assert.rejects(jobs.retryMatching({ state: 'queued' }), /^InputError: state: queued jobs cannot be retried: only failed or dead jobs can be retried/);
  await assert.rejects(jobs.cancelMatching({ state: 'succeeded' }), /^InputError: state: succeeded jobs cannot be cancelled: only scheduled, queued, running or failed jobs can be cancelled/);
  await assert.rejects(jobs.cancelMatching({ queue: 'Bad' }), /^InputError: queue: 'Bad' is not a valid queue name/);
  await assert.rejects(queues.pause('Bad Queue'), /^InputError: queue: 'Bad Queue' is not a valid queue name/);
});

test('an unreachable API server is said so', async () => {
  await assert.rejects(offline().jobs.get('job_abc'), /cannot reach the API server/);
});

test('the idempotency rule: the earliest job within the window holds the key', () => {
  const day = 24 * 3600 * 1000;
  assert.equal(holder([[2000, false, 'job-b'], [1000, false, 'job-a']], 3000, day), 'job-a');
  assert.equal(holder([[1000, true, 'job-a'], [1000, false, 'job-b']], 3000, day), 'job-b', 'a job already let run wins a tie');
  assert.equal(holder([[1000, false, 'job-a']], 1000 + day, day), undefined, 'the claim ran out');
  assert.equal(holder([[0, false, 'job-a'], [day + 5, false, 'job-b']], day + 10, day), 'job-b');
  assert.deepEqual(differences({ queue: 'q', handler: 'h', payload: { a: 1 } }, { queue: 'q', handler: 'h', payload: { a: true } }), ['payload']);
  assert.deepEqual(differences({ queue: 'q', handler: 'h' }, { queue: 'q', handler: 'h', payload: {} }), []);
});

test('a concurrency key is checked as the Python client checks it', async () => {
  const { jobs } = offline();
  const refused = (options, re) => assert.rejects(jobs.create(options), (e) => e instanceof InputError && re.test(e.message));
  await refused({ queue: 'q', handler: 'h', concurrencyKey: '' }, /^concurrencyKey: a concurrency key must not be empty/);
  await refused({ queue: 'q', handler: 'h', concurrencyKey: 'k'.repeat(254) }, /^concurrencyKey: a concurrency key has at most 253 characters, got 254/);
  await refused({ queue: 'q', handler: 'h', concurrencyKey: 7 }, /^concurrencyKey: a concurrency key must not be empty/);
});

test('createMany checks every item first, naming jobs[i].field', async () => {
  const { jobs } = offline();
  await assert.rejects(jobs.createMany([{ queue: 'q', handler: 'h' }, { queue: 'q', handler: 'h', concurrencyKey: '' }]),
    (e) => e instanceof InputError && /^jobs\[1\]\.concurrencyKey: a concurrency key must not be empty/.test(e.message));
  await assert.rejects(jobs.createMany([{ queue: 'Bad', handler: 'h' }]), /^InputError: jobs\[0\]\.queue: 'Bad' is not a valid queue name/);
  const results = await jobs.createMany([{ queue: 'q', handler: 'h' }]);
  assert.equal(results.length, 1);
  assert.equal(results[0].status, 500);
  assert.match(results[0].error.message, /cannot reach the API server/);
});

test('items repeating an earlier key go after it', () => {
  assert.deepEqual(firstUses([undefined, 'a', 'b', 'a', undefined, 'b', 'a']), [[0, 1, 2, 4], [3, 5, 6]]);
});

test('a status the operator never wrote is read without the CRD defaults, as Python reads it', () => {
  // The same cases as tests/unit/test_upgrade.py's (resources/job.py, written_status).
  const unwritten = { state: 'queued', observedGeneration: 0 };
  assert.deepEqual(writtenStatus(unwritten), {});
  assert.deepEqual(writtenStatus({ state: 'queued' }), {});
  assert.deepEqual(writtenStatus({ ...unwritten, cancelRequested: 'replaced' }), { cancelRequested: 'replaced' });
  const written = { state: 'queued', observedGeneration: 1 };
  assert.deepEqual(writtenStatus(written), written);
  const old = { state: 'queued', observedGeneration: 0, queuedAt: '2026-03-01T11:59:00Z', attempt: 3 };
  assert.deepEqual(writtenStatus(old), old);
  assert.deepEqual(writtenStatus(undefined), {});
  assert.deepEqual(writtenStatus({ state: 'running' }), { state: 'running' });
});
