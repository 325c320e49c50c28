import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CommandWork, Execution, FunctionWork, Reaper, commandEnvironment } from '../dist/worker/work.js';
import { parseProgressLine } from '../dist/common.js';
import { NonRetryableError, Snooze } from '../dist/index.js';

const job = { id: 'job_x', name: 'job-x', namespace: 'n', queue: 'q', handler: 'h', attempt: 1, payload: { a: 1 }, scheduledAt: '' };

function fn(body) {
  const abort = new AbortController();
  const ctx = { signal: abort.signal, get cancelled() { return abort.signal.aborted; }, jobs: {} };
  return new FunctionWork(body, job, ctx, abort, '[job-x#1]');
}

test('a function: 0 on return, 1 with its error, 86 for NonRetryableError', async () => {
  assert.deepEqual(await new Execution(fn(async () => 'ok'), 1).run(), { exitCode: 0, output: '"ok"' });
  assert.deepEqual(await new Execution(fn(async () => {}), 1).run(), { exitCode: 0 });
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

test('a worker SIGKILLed right after it spawns a command takes the command with it (the reaper is told by the command)', async () => {
  // The worker dies before its event loop turns once after the spawn: only the command itself can have told the reaper.
  const script = `
    import { CommandWork, Reaper, commandEnvironment } from ${JSON.stringify(new URL('../dist/worker/work.js', import.meta.url).href)};
    import { writeSync } from 'node:fs';
    const work = new CommandWork(['sh', '-c', 'sleep 30 & wait'], commandEnvironment(process.env, {}, {}), {}, '[t]', new Reaper());
    work.run();
    writeSync(1, String(work.proc.pid));
    process.kill(process.pid, 'SIGKILL');`;
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
  assert.equal(child.signal, 'SIGKILL');
  const group = Number(child.stdout);
  assert.ok(group > 0, child.stderr);
  const alive = () => { try { process.kill(-group, 0); return true; } catch { return false; } };
  for (const until = Date.now() + 10000; alive() && Date.now() < until;) await new Promise((r) => setTimeout(r, 50));
  assert.ok(!alive(), `the command's group ${group} outlived its worker`);
});

test('with a reaper, a command that cannot start is told as before: 127 and the errno, not a message of sh', async () => {
  const reaper = new Reaper();
  try {
    const missing = await new Execution(new CommandWork(['sextant-no-such-command'], env, {}, '[t]', reaper), 1).run();
    assert.deepEqual(missing, { exitCode: 127, message: "cannot start 'sextant-no-such-command': ENOENT" });
    const ok = await new Execution(new CommandWork(['sh', '-c', 'read line; test "$line" = \'{"a":1}\' && test "$0" = sh'], env, { a: 1 }, '[t]', reaper), 1).run();
    assert.deepEqual(ok, { exitCode: 0 });
  } finally {
    reaper.close();
  }
});

test('an output line of 100 KiB does not hang it', async () => {
  const loud = await new Execution(new CommandWork(['sh', '-c', "head -c 102400 /dev/zero | tr '\\0' x; echo; echo last >&2; exit 2"], env, {}, '[t]'), 1).run();
  assert.equal(loud.exitCode, 2);
  assert.match(loud.message, /last$/);
});

test('a stop sends SIGTERM, then SIGKILL to the whole group after the grace', async () => {
  const ready = join(mkdtempSync(join(tmpdir(), 'sextant-test-')), 'ready');
  const stubborn = new Execution(new CommandWork(['sh', '-c', `trap "" TERM; touch ${ready}; sleep 30 & wait`], env, {}, '[t]'), 0.2);
  const run = stubborn.run();
  // Stopped once it ignores SIGTERM: before its trap, SIGTERM alone would end it.
  for (const until = Date.now() + 10000; !existsSync(ready) && Date.now() < until;) await new Promise((r) => setTimeout(r, 20));
  stubborn.stop('Cancelled');
  const ended = await run;
  assert.equal(ended.exitCode, 137);
});

test("a command's environment is not the worker's", () => {
  const made = commandEnvironment({ PATH: '/bin', SECRET: 's', LC_ALL: 'C', KUBECONFIG: '/k' }, { SMTP: 'x' }, { SEXTANT_JOB_ID: 'j' });
  assert.deepEqual(made, { PATH: '/bin', LC_ALL: 'C', SMTP: 'x', SEXTANT_JOB_ID: 'j' });
  assert.equal(commandEnvironment({}, {}, {}).PATH, '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin');
});

test('a return value is the output: JSON within the 32 KiB cap, else a note saying why', async () => {
  assert.deepEqual(await new Execution(fn(() => ({ total: 3, ids: [1, 2] })), 1).run(), { exitCode: 0, output: '{"total":3,"ids":[1,2]}' });
  const big = await new Execution(fn(() => ({ blob: 'x'.repeat(40000) })), 1).run();
  assert.deepEqual(big, { exitCode: 0, outputNote: 'the output is 40011 bytes as JSON, over the cap of 32768 bytes; not kept' });
  const odd = await new Execution(fn(() => ({ when: new Map() })), 1).run();
  assert.equal(odd.exitCode, 0);
  assert.match(odd.outputNote, /^the output is not JSON \(.*\); not kept$/);
  assert.match((await new Execution(fn(() => NaN), 1).run()).outputNote, /^the output is not JSON/);
});

test("a command's output is the JSON it wrote to $SEXTANT_OUTPUT_FILE, read on exit 0", async () => {
  const env = commandEnvironment(process.env, {}, {});
  const run = (script) => new Execution(new CommandWork(['sh', '-c', script], env, {}, '[job-x#1]'), 1).run();
  assert.deepEqual(await run('echo \'{"rows": 4}\' > "$SEXTANT_OUTPUT_FILE"'), { exitCode: 0, output: '{"rows":4}' });
  assert.deepEqual(await run('true'), { exitCode: 0 });
  assert.match((await run('echo nope > "$SEXTANT_OUTPUT_FILE"')).outputNote, /^SEXTANT_OUTPUT_FILE does not hold JSON \(.*\); not kept$/s);
  assert.match((await run('head -c 40000 /dev/zero | tr "\\0" 1 > "$SEXTANT_OUTPUT_FILE"')).outputNote, /^SEXTANT_OUTPUT_FILE holds over 32768 bytes, the output's cap; not kept$/);
  const failed = await run('echo \'{"rows": 4}\' > "$SEXTANT_OUTPUT_FILE"; exit 3');
  assert.equal(failed.exitCode, 3);
  assert.equal(failed.output, undefined);
});

test('a snooze: exit 85 with snoozeSeconds, from ctx.snooze, throw new Snooze or a command with $SEXTANT_SNOOZE_FILE', async () => {
  assert.deepEqual(await new Execution(fn(() => { throw new Snooze('1m30s'); }), 1).run(),
    { exitCode: 85, message: 'snoozed for 90s', snoozeSeconds: 90 });
  assert.deepEqual(await new Execution(fn(() => { throw new Snooze(0.5); }), 1).run(),
    { exitCode: 85, message: 'snoozed for 0.5s', snoozeSeconds: 0.5 });
  assert.throws(() => new Snooze(604801), /^RangeError: snooze: the delay must lie from 0s to 7 days, not 604801/);
  assert.throws(() => new Snooze(-1), /snooze: the delay must lie from 0s to 7 days/);
  assert.throws(() => new Snooze('soon'), /'soon' is not a duration/);
  assert.throws(() => new Snooze(null), /^TypeError: snooze: the delay must be a duration such as "30s" or a number of seconds, not null/);
  const env = commandEnvironment(process.env, {}, {});
  const run = (script) => new Execution(new CommandWork(['sh', '-c', script], env, {}, '[job-x#1]'), 1).run();
  assert.deepEqual(await run('echo 30s > "$SEXTANT_SNOOZE_FILE"; exit 85'), { exitCode: 85, message: 'snoozed for 30s', snoozeSeconds: 30 });
  assert.deepEqual(await run('echo 12 > "$SEXTANT_SNOOZE_FILE"; exit 85'), { exitCode: 85, message: 'snoozed for 12s', snoozeSeconds: 12 });
  assert.deepEqual(await run('exit 85'), { exitCode: 85, message: 'SEXTANT_SNOOZE_FILE was not written (write a delay such as 30s there before exit 85)' });
  assert.deepEqual(await run('echo 8d > "$SEXTANT_SNOOZE_FILE"; exit 85'),
    { exitCode: 85, message: 'SEXTANT_SNOOZE_FILE: \'8d\' is not a duration: use a number and a unit (ms, s, m, h), e.g. "30s" or "1h30m"' });
});

test("a command's progress: the latest line of $SEXTANT_PROGRESS_FILE, read while it runs", async () => {
  const seen = [];
  const env = commandEnvironment(process.env, {}, {});
  const work = new CommandWork(['sh', '-c', 'echo "0.25 a quarter" > "$SEXTANT_PROGRESS_FILE"; sleep 1.5; printf "0.25 a quarter\\n0.5 half\\n" > "$SEXTANT_PROGRESS_FILE"; sleep 1.5'],
    env, {}, '[job-x#1]', undefined, (fraction, message) => seen.push([fraction, message]));
  assert.deepEqual(await new Execution(work, 1).run(), { exitCode: 0 });
  assert.deepEqual(seen, [[0.25, 'a quarter'], [0.5, 'half']]);
  assert.deepEqual(parseProgressLine('1'), [1, undefined]);
  assert.equal(parseProgressLine(`0.1 ${'m'.repeat(300)}`)[1].length, 200);
  assert.throws(() => parseProgressLine('1.5 over'), /^RangeError: progress: the fraction must be a number from 0 to 1, not 1.5/);
  assert.throws(() => parseProgressLine('half done'), /progress: SEXTANT_PROGRESS_FILE must start with a fraction from 0 to 1, not 'half'/);
});

test('the files a command writes are read bounded, whatever it made of them: /dev/zero, a FIFO, a long file', async () => {
  const seen = [];
  const env = commandEnvironment(process.env, {}, {});
  const run = (script) => new Execution(new CommandWork(['sh', '-c', script], env, {}, '[job-x#1]', undefined,
    (fraction, message) => seen.push([fraction, message])), 1).run();
  assert.deepEqual(await run('ln -s /dev/zero "$SEXTANT_SNOOZE_FILE"; exit 85'),
    { exitCode: 85, message: 'SEXTANT_SNOOZE_FILE: snooze is not a regular file' });
  assert.deepEqual(await run('mkfifo "$SEXTANT_SNOOZE_FILE"; exit 85'),
    { exitCode: 85, message: 'SEXTANT_SNOOZE_FILE: snooze is not a regular file' });
  assert.match((await run('mkfifo "$SEXTANT_OUTPUT_FILE"')).outputNote,
    /^SEXTANT_OUTPUT_FILE cannot be read \(output.json is not a regular file\); not kept$/);
  assert.deepEqual(await run('ln -s /dev/zero "$SEXTANT_PROGRESS_FILE"; sleep 1.5'), { exitCode: 0 });
  assert.deepEqual(seen, []);
  // 4 MB, whole at once: only its last line is progress
  assert.deepEqual(await run('f="$SEXTANT_PROGRESS_FILE"; seq 1 400000 | sed "s/.*/0.1 step/" > "$f.new"; echo "0.5 half" >> "$f.new"; mv "$f.new" "$f"; sleep 1.5'),
    { exitCode: 0 });
  assert.deepEqual(seen, [[0.5, 'half']]);
});
