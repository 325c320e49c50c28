import { test } from 'node:test';
import assert from 'node:assert/strict';
import { plan, serving, PlanError } from '../dist/worker/plan.js';

const handlers = new Map([
  ['charge-card', { worker: {} }],
  ['shout', { worker: { command: ['sh', '-c', 'cat'] } }],
  ['in-pods', { template: {} }],
]);
const queues = new Set(['payments']);

test('a function with no Handler object, or a pod-mode one, is refused naming it', () => {
  assert.throws(() => plan('shop', queues, handlers, new Set(['ghost'])),
    (err) => err instanceof PlanError && /handler 'ghost' is defined by --module, but there is no Handler 'ghost' in namespace shop/.test(err.message));
  assert.throws(() => plan('shop', queues, handlers, new Set(['in-pods'])), /runs its jobs in pods \(spec.template\)/);
  assert.throws(() => plan('shop', queues, handlers, new Set(['shout'])), /says to run the command \["sh","-c","cat"\]: keep one of the two/);
});

test('commands run only where allowed', () => {
  const served = plan('shop', queues, handlers, new Set(['charge-card']));
  assert.deepEqual([...served.functions], ['charge-card']);
  assert.deepEqual([...served.refused], ['shout']);
  assert.throws(() => plan('shop', queues, handlers, new Set(), undefined, new Set(['shout'])),
    /--handler shout: Handler 'shout' runs the command .*give --allow-command shout/);
  assert.deepEqual([...plan('shop', queues, handlers, new Set(), undefined, undefined, true).commands.keys()], ['shout']);
  assert.deepEqual([...serving(queues, handlers, new Set(), undefined, undefined, new Set(['shout'])).commands.keys()], ['shout']);
});

test('queues and handlers that do not exist, and nothing to serve', () => {
  assert.throws(() => plan('shop', queues, handlers, new Set(['charge-card']), new Set(['nope'])), /--queue nope: there is no Queue 'nope' in namespace shop/);
  assert.throws(() => plan('shop', new Set(), handlers, new Set(['charge-card'])), /there is no Queue in namespace shop to serve/);
  assert.throws(() => plan('shop', queues, handlers, new Set()), /nothing to serve: .* \(shout\) run commands/);
  assert.throws(() => plan('shop', queues, handlers, new Set(), undefined, undefined, new Set(['nope'])), /--allow-command nope: there is no Handler 'nope'/);
});
