import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defineHandler, NonRetryableError, createWorker } from '../dist/index.js';
import { definedHandlers } from '../dist/handlers.js';

test('defineHandler registers a function under its Handler name', () => {
  const fn = async () => {};
  const h = defineHandler('charge-card', fn);
  assert.equal(h.name, 'charge-card');
  assert.equal(h.fn, fn);
  assert.equal(definedHandlers().get('charge-card'), h);
  assert.equal(defineHandler('charge-card', fn), h, 'the same function again is the same handler');
});

test('a handler defined twice is an error naming it', () => {
  defineHandler('twice', async () => {});
  assert.throws(() => defineHandler('twice', async () => {}), /handler 'twice' is defined twice/);
});

test('a handler name is a Handler object name', () => {
  assert.throws(() => defineHandler('Charge Card', () => {}), /defineHandler: 'Charge Card' is not a valid handler name/);
  assert.throws(() => defineHandler('ok', 'not a function'), /fn must be a function/);
});

test('NonRetryableError is an Error with its name', () => {
  const err = new NonRetryableError('card declined');
  assert.ok(err instanceof Error);
  assert.equal(err.name, 'NonRetryableError');
});

test('createWorker refuses bad options naming them, before connecting', () => {
  assert.throws(() => createWorker({ concurrency: 0 }), /concurrency: must be a whole number of at least 1, not 0/);
  assert.throws(() => createWorker({ name: 'Bad Name' }), /name 'Bad Name': a worker's name must be a DNS label/);
  assert.throws(() => createWorker({ drainGrace: -1 }), /drainGrace: must be 0 seconds or more/);
  assert.throws(() => createWorker({ handlers: [() => {}] }), /handlers\[0\]: not a handler/);
});
