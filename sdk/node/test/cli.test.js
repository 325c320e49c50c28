import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, mkdirSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { spawnSync } from 'node:child_process';
import { parse, commandEnv, BadInput } from '../dist/cli.js';

const BIN = resolve(import.meta.dirname, '../dist/bin/sextant-worker.js');

test('the flags and defaults of sextant worker', () => {
  const p = parse(['--module', './h.js', '-n', 'shop', '--queue', 'emails', '--queue=payments', '--concurrency', '16',
                   '--drain-grace', '1m', '--allow-command', 'shout', '--name', 'w-1', '--no-events']);
  assert.deepEqual(p.modules, ['./h.js']);
  assert.equal(p.settings.namespace, 'shop');
  assert.deepEqual([...p.settings.wantQueues], ['emails', 'payments']);
  assert.equal(p.settings.concurrency, 16);
  assert.equal(p.settings.drainGraceSeconds, 60);
  assert.deepEqual([...p.settings.allowCommands], ['shout']);
  const d = parse([]);
  assert.equal(d.settings.concurrency, 8);
  assert.equal(d.settings.drainGraceSeconds, 25);
  assert.equal(d.settings.wantQueues, undefined);
  assert.deepEqual([...d.settings.allowCommands], []);
  assert.equal(parse(['--allow-commands']).settings.allowCommands, true);
});

test('bad flags are refused naming the flag', () => {
  const refused = (argv, re) => assert.throws(() => parse(argv, {}), (e) => e instanceof BadInput && re.test(e.message));
  refused(['--concurrency', 'x'], /argument --concurrency: 'x' is not a whole number/);
  refused(['--concurrency', '0'], /argument --concurrency: 0 is not at least 1/);
  refused(['--drain-grace', '10'], /argument --drain-grace: '10' is not a duration/);
  refused(['--allow-commands', '--allow-command', 'a'], /--allow-commands runs every command handler; --allow-command a names some/);
  refused(['--name', 'Bad_Name'], /--name 'Bad_Name': a worker's name must be a DNS label/);
  refused(['-n', 'Shop'], /--namespace: 'Shop' is not a valid namespace/);
  refused(['--queue', 'Q!'], /--queue: 'Q!' is not a valid queue name/);
  refused(['--frobnicate'], /Unknown option '--frobnicate'/);
  refused(['--log-level', 'loud'], /--log-level loud: use debug, info, warning or error/);
  refused(['-A'], /a worker serves one namespace/);
});

test('--command-env: NAME from the environment, NAME=VALUE set, the worker\'s own secrets never', () => {
  assert.deepEqual(commandEnv(['A', 'B=2'], { A: '1' }), { A: '1', B: '2' });
  assert.throws(() => commandEnv(['MISSING'], {}), /--command-env MISSING: the worker's environment has no MISSING/);
  assert.throws(() => commandEnv(['SEXTANT_JOB_ID=x'], {}), /the SEXTANT_\* variables are the attempt's own/);
  assert.throws(() => commandEnv(['KUBECONFIG'], { KUBECONFIG: '/x' }), /never passed to a command/);
  assert.throws(() => commandEnv(['1X=2'], {}), /is not NAME or NAME=VALUE/);
});

/** The worker as a user starts it, in a directory with @sextant/node installed (a link to this package). */
function app(files) {
  const dir = mkdtempSync(join(tmpdir(), 'sextant-node-'));
  mkdirSync(join(dir, 'node_modules', '@sextant'), { recursive: true });
  symlinkSync(resolve(import.meta.dirname, '..'), join(dir, 'node_modules', '@sextant', 'node'));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return dir;
}

function start(dir, ...argv) {
  // A kubeconfig that names no reachable server: every case here must fail before connecting.
  writeFileSync(join(dir, 'kubeconfig'), 'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]\nusers: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n');
  return spawnSync(process.execPath, [BIN, '--kubeconfig', join(dir, 'kubeconfig'), ...argv], { cwd: dir, encoding: 'utf8' });
}

test('a module that does not load: exit 2, naming it and its error', () => {
  const dir = app({ 'broken.js': "import { defineHandler } from '@sextant/node';\nthrow new Error('no billing key');\n" });
  const r = start(dir, '--module', './broken.js');
  assert.equal(r.status, 2, r.stderr);
  assert.match(r.stderr, /error: --module \.\/broken\.js does not load: Error: no billing key/);
  const missing = start(dir, '--module', './nope.js');
  assert.equal(missing.status, 2);
  assert.match(missing.stderr, /error: --module \.\/nope\.js: no such file/);
});

test('a handler defined twice: exit 2, naming it', () => {
  const dir = app({
    'a.js': "import { defineHandler } from '@sextant/node';\nexport default defineHandler('send', async () => {});\n",
    'b.js': "import { defineHandler } from '@sextant/node';\nexport default defineHandler('send', async () => {});\n",
  });
  const r = start(dir, '--module', './a.js', '--module', './b.js');
  assert.equal(r.status, 2, r.stderr);
  assert.match(r.stderr, /error: --module \.\/b\.js does not load: Error: handler 'send' is defined twice/);
});

test('bad flags: exit 2 with the message, before anything connects', () => {
  const r = start(app({}), '--concurrency', 'many');
  assert.equal(r.status, 2);
  assert.match(r.stderr, /^error: argument --concurrency: 'many' is not a whole number/m);
  const help = start(app({}), '--help');
  assert.equal(help.status, 0);
  assert.match(help.stdout, /usage: sextant-worker/);
});

test('--metrics-port serves the worker\'s metrics', async () => {
  assert.throws(() => parse(['--metrics-port', '99999']), /argument --metrics-port: '99999' is not a port/);
  const p = parse(['--metrics-port', '9090']);
  assert.deepEqual([p.metricsHost, p.metricsPort], ['127.0.0.1', 9090]);
  const { WorkerMetrics } = await import('../dist/worker/metrics.js');
  const metrics = new WorkerMetrics('w', () => [1, 4]);
  metrics.attempt('q', 'h', 'succeeded');
  metrics.refused();
  const server = await metrics.serve(0, '127.0.0.1');
  const text = await (await fetch(`http://127.0.0.1:${server.address().port}/metrics`)).text();
  server.close();
  assert.match(text, /^sextant_worker_attempts_total\{worker="w",queue="q",handler="h",result="succeeded"\} 1$/m);
  assert.match(text, /^sextant_worker_slots\{worker="w",state="free"\} 3$/m);
  assert.match(text, /^sextant_worker_results_refused_total\{worker="w"\} 1$/m);
});
