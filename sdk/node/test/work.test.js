import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CommandWork, Execution, FunctionWork, commandEnvironment } from '../dist/worker/work.js';
import { NonRetryableError } from '../dist/index.js';

const job = { id: 'job_x', name: 'job-x', namespace: 'n', queue: 'q', handler: 'h', attempt: 1, payload: { a: 1 }, scheduledAt: '' };

function fn(body) {
  const abort = new AbortController();
  const ctx = { signal: abort.signal, get cancelled() { return abort.signal.aborted; }, jobs: {} };
  return new FunctionWork(body, job, ctx, abort, '[job-x#1]');
}

test('a function: 0 on return, 1 with its error, 86 for NonRetryableError', async () => {
  assert.deepEqual(await new Execution(fn(async () => 'ok'), 1).run(), { exitCode: 0 });
  assert.deepEqual(await new Execution(fn(async () => { throw new TypeError('bad order'); }), 1).run(),
    { exitCode: 1, message: 'TypeError: bad order' });
  assert.deepEqual(await new Execution(fn(() => { throw new NonRetryableError('card declined'); }), 1).run(),
    { exitCode: 86, message: 'NonRetryableError: card declined' });
});

test('a stop aborts ctx.signal with its reason; one that ignores it is given up on after the grace', async () => {
  let reason;
  const polite = new Execution(fn((j, ctx) => new Promise((_, reject) => ctx.signal.addEventListener('abort', () => {
    reason = ctx.signal.reason.stop;
    reject(ctx.signal.reason);
  }))), 5);
  const run = polite.run();
  polite.stop('Cancelled');
  assert.deepEqual(await run, { exitCode: 143, message: 'cancelled' });
  assert.equal(reason, 'Cancelled');

  const deaf = new Execution(fn(() => new Promise(() => {})), 0.1);
  const started = Date.now();
  const run2 = deaf.run();
  deaf.stop('Timeout');
  const ended = await run2;
  assert.equal(ended.exitCode, 137);
  assert.match(ended.message, /did not stop within cancelGrace \(0.1s\) and was given up on/);
  assert.ok(deaf.lingering, 'its slot is held until it settles');
  assert.ok(Date.now() - started < 3000);
});

const env = commandEnvironment(process.env, {}, { SEXTANT_JOB_ID: 'job_x' });

test('a command gets the payload on stdin, its exit code is the outcome, its last lines the message', async () => {
  const ok = await new Execution(new CommandWork(['sh', '-c', 'read line; test "$line" = \'{"a":1}\''], env, { a: 1 }, '[t]'), 1).run();
  assert.deepEqual(ok, { exitCode: 0 });
  const failed = await new Execution(new CommandWork(['sh', '-c', 'echo first; echo "no such order" >&2; exit 4'], env, {}, '[t]'), 1).run();
  assert.equal(failed.exitCode, 4);
  assert.match(failed.message, /first\nno such order/);
  const missing = await new Execution(new CommandWork(['/no/such/command'], env, {}, '[t]'), 1).run();
  assert.equal(missing.exitCode, 127);
});

test('an output line of 100 KiB does not hang it', async () => {
  const loud = await new Execution(new CommandWork(['sh', '-c', "head -c 102400 /dev/zero | tr '\\0' x; echo; echo last >&2; exit 2"], env, {}, '[t]'), 1).run();
  assert.equal(loud.exitCode, 2);
  assert.match(loud.message, /last$/);
});

test('a stop sends SIGTERM, then SIGKILL to the whole group after the grace', async () => {
  const stubborn = new Execution(new CommandWork(['sh', '-c', 'trap "" TERM; sleep 30 & wait'], env, {}, '[t]'), 0.2);
  const run = stubborn.run();
  await new Promise((r) => setTimeout(r, 200));
  stubborn.stop('Cancelled');
  const ended = await run;
  assert.equal(ended.exitCode, 137);
});

test("a command's environment is not the worker's", () => {
  const made = commandEnvironment({ PATH: '/bin', SECRET: 's', LC_ALL: 'C', KUBECONFIG: '/k' }, { SMTP: 'x' }, { SEXTANT_JOB_ID: 'j' });
  assert.deepEqual(made, { PATH: '/bin', LC_ALL: 'C', SMTP: 'x', SEXTANT_JOB_ID: 'j' });
  assert.equal(commandEnvironment({}, {}, {}).PATH, '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin');
});
