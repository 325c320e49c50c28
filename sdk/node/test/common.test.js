import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import {
  checkPayload, formatTime, jobId, jobName, keyedName, parseDuration, randomName, objectName, idempotencyWindowMs,
  ID_ALPHABET, ID_LENGTH, NAME_MAX, PAYLOAD_MAX_BYTES, MAX_PAYLOAD_DEPTH, KEY_MAX, CONCURRENCY_KEY_MAX, PRIORITY_MIN,
  PRIORITY_MAX, IDEMPOTENCY_WINDOW_MS, SNOOZE_EXIT_CODE, OUTPUT_MAX_BYTES, PROGRESS_MESSAGE_MAX,
} from '../dist/common.js';
import { NON_RETRYABLE_EXIT_CODE } from '../dist/handlers.js';
import { PROTOCOL } from '../dist/generated/protocol.js';
import { FINALIZER, LABEL_WORKER } from '../dist/worker/registration.js';
import { DEFAULT_CONCURRENCY, DEFAULT_DRAIN_GRACE_SECONDS } from '../dist/worker/index.js';
import { OUTPUT_FILE_ENV, PROGRESS_FILE_ENV, SNOOZE_FILE_ENV } from '../dist/worker/work.js';

// The worker protocol's one definition, which the Python side reads too (operator/sextant/resources/protocol.json;
// tests/unit/test_protocol.py checks Python against the same golden values).
const FIXTURE = JSON.parse(readFileSync(new URL('../../../operator/sextant/resources/protocol.json', import.meta.url), 'utf8'));
const C = FIXTURE.constants;

test('the built SDK holds the protocol file\'s constants (regenerate with make crds, rebuild with make node-sdk)', () => {
  assert.deepEqual({ ...PROTOCOL }, C);
});

test('the public constants are the protocol\'s', () => {
  assert.deepEqual(
    [SNOOZE_EXIT_CODE, NON_RETRYABLE_EXIT_CODE, ID_ALPHABET, ID_LENGTH, NAME_MAX, PAYLOAD_MAX_BYTES, MAX_PAYLOAD_DEPTH,
      KEY_MAX, CONCURRENCY_KEY_MAX, PRIORITY_MIN, PRIORITY_MAX, IDEMPOTENCY_WINDOW_MS, OUTPUT_MAX_BYTES,
      PROGRESS_MESSAGE_MAX, FINALIZER, LABEL_WORKER, DEFAULT_CONCURRENCY, DEFAULT_DRAIN_GRACE_SECONDS, OUTPUT_FILE_ENV,
      PROGRESS_FILE_ENV, SNOOZE_FILE_ENV],
    [C.snoozeExitCode, C.nonRetryableExitCode, C.idAlphabet, C.idLength, C.nameMax, C.payloadMaxBytes, C.maxPayloadDepth,
      C.keyMax, C.concurrencyKeyMax, C.priorityMin, C.priorityMax, C.idempotencyWindowHours * 3600 * 1000,
      C.outputMaxBytes, C.progressMessageMax, C.workerFinalizer, C.workerLabel, C.workerConcurrency,
      C.workerDrainGraceSeconds, C.outputFileEnv, C.progressFileEnv, C.snoozeFileEnv]);
});

test('keyedName names a keyed job exactly as the Python client does', () => {
  // operator/sextant/lifecycle/idempotency.keyed_name of the same inputs
  for (const { namespace, key, generation, name } of FIXTURE.golden.keyedName) {
    assert.equal(keyedName(namespace, key, generation), name);
  }
});

test('durations are read as the Python side reads them', () => {
  for (const { text, seconds } of FIXTURE.golden.durationSeconds) assert.equal(parseDuration(text), seconds, text);
  for (const text of FIXTURE.golden.refusedDurations) assert.throws(() => parseDuration(text), Error, text);
});

test('random names use the unambiguous alphabet', () => {
  const name = new RegExp(`^job-[${C.idAlphabet}]{${C.idLength}}$`);
  for (let i = 0; i < 200; i++) assert.match(randomName(), name);
});

test('ids in both spellings', () => {
  assert.equal(jobId('job-8f3k2m9q'), 'job_8f3k2m9q');
  assert.equal(jobName('id', 'job_8f3k2m9q'), 'job-8f3k2m9q');
  assert.throws(() => jobName('id', 'Job 1'), /^InputError: id: 'Job 1' is not a job id/);
});

test('a refused duration names the rule', () => {
  assert.throws(() => parseDuration('10'), /'10' is not a duration: use a number and a unit/);
  assert.throws(() => parseDuration('99999999h'), /longer than the maximum duration, 87600h/);
});

test('times are written with microseconds, in UTC', () => {
  assert.equal(formatTime(new Date('2026-12-03T08:41:07.412Z')), '2026-12-03T08:41:07.412000Z');
  assert.equal(formatTime(new Date('2026-12-03T08:41:07.412Z'), false), '2026-12-03T08:41:07Z');
});

test('a payload is a JSON object within 256 KiB, refused naming the field and the rule', () => {
  assert.deepEqual(checkPayload('payload', { a: [1, { b: null }] }), { a: [1, { b: null }] });
  assert.throws(() => checkPayload('payload', [1]), /payload: the payload must be a JSON object \(\{...\}\), got an array/);
  assert.throws(() => checkPayload('payload', 'x'), /got a string/);
  assert.throws(() => checkPayload('payload', { big: 'x'.repeat(256 * 1024) }),
    /payload: the payload is 262154 bytes as JSON, over the limit of 262144 bytes \(256 KiB\)/);
  assert.throws(() => checkPayload('payload', { n: NaN }), /NaN is not a JSON number/);
  assert.throws(() => checkPayload('payload', { d: new Date() }), /the payload must be JSON/);
  let deep = {};
  for (let i = 0; i < 101; i++) deep = { d: deep };
  assert.throws(() => checkPayload('payload', deep), /nests deeper than 100 levels/);
});

test('names are DNS labels', () => {
  assert.equal(objectName('queue', 'emails'), 'emails');
  assert.throws(() => objectName('queue', 'Emails'), /^InputError: queue: 'Emails' is not a valid name/);
  assert.throws(() => objectName('queue', ''), /queue: a name is required/);
});

test('the idempotency window follows SEXTANT_IDEMPOTENCY_WINDOW as the operator does', () => {
  assert.equal(idempotencyWindowMs({}), 24 * 3600 * 1000);
  assert.equal(idempotencyWindowMs({ SEXTANT_IDEMPOTENCY_WINDOW: '2s' }), 2000);
  assert.throws(() => idempotencyWindowMs({ SEXTANT_IDEMPOTENCY_WINDOW: '0s' }), /must be longer than 0s/);
});
