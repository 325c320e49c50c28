import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  checkPayload, formatTime, jobId, jobName, keyedName, parseDuration, randomName, objectName, idempotencyWindowMs,
} from '../dist/common.js';

test('keyedName names a keyed job exactly as the Python client does', () => {
  // operator/sextant/lifecycle/idempotency.keyed_name of the same inputs
  assert.equal(keyedName('shop', 'receipt-42', 0), 'job-5e45mnsy');
  assert.equal(keyedName('default', 'k', 3), 'job-44xfhx6j');
  assert.equal(keyedName('ns', 'ünï', 1), 'job-uqb9a552');
});

test('random names use the unambiguous alphabet', () => {
  for (let i = 0; i < 200; i++) assert.match(randomName(), /^job-[23456789abcdefghjkmnpqrstuvwxyz]{8}$/);
});

test('ids in both spellings', () => {
  assert.equal(jobId('job-8f3k2m9q'), 'job_8f3k2m9q');
  assert.equal(jobName('id', 'job_8f3k2m9q'), 'job-8f3k2m9q');
  assert.throws(() => jobName('id', 'Job 1'), /^InputError: id: 'Job 1' is not a job id/);
});

test('durations', () => {
  assert.equal(parseDuration('1h30m'), 5400);
  assert.equal(parseDuration('200ms'), 0.2);
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
