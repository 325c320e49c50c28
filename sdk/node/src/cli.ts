// `sextant-worker`: the Node worker, with `sextant worker`'s flags, defaults and start errors (docs/workers.md,
// "Running a worker"). Bad input is an error at start that names it, exit code 2: a module that does not load, a
// handler defined twice, a function without a worker-mode Handler, a --queue or --handler that does not exist, a
// command it is not allowed to run, a bad --command-env, nothing to serve. Exit 0 after a drain (SIGTERM, Ctrl-C; a
// second one skips what is left of the grace), 1 when another process took its name over. An API outage never
// makes it exit.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { namespaceName, objectName, parseDuration, InputError } from './common.js';
import { definedHandlers } from './handlers.js';
import { ApiError, Kube } from './kube.js';
import { DEFAULT_CONCURRENCY, DEFAULT_DRAIN_GRACE_SECONDS, PlanError, Worker } from './worker/index.js';
import { isLevel } from './worker/log.js';
import { defaultName, nameProblem } from './worker/registration.js';
import type { Settings } from './worker/service.js';

export const USAGE = `usage: sextant-worker [--kubeconfig FILE] [--context NAME] [-n NAMESPACE] [--module FILE]...
                      [--queue Q]... [--handler H]... [--allow-commands | --allow-command H...]
                      [--command-env NAME[=VALUE]]... [--concurrency N] [--name NAME] [--drain-grace 25s]
                      [--metrics-port PORT] [--metrics-host ADDRESS] [--log-level info]

A long-running worker (docs/workers.md): it announces itself with a Worker object of its own and runs the jobs the
operator assigns to it — the handlers its --module files define with defineHandler, and Handlers' commands
(spec.worker.command) it is allowed to run, as a process per job with the payload on stdin.

  --module FILE          a JavaScript module whose defineHandler() handlers it serves (repeatable; a path, or a
                         package name resolved from the current directory)
  --queue Q              a queue to serve (repeatable; default: every Queue of the namespace, as they come and go)
  --handler H            serve only this handler (repeatable; default: every worker-mode Handler it can run)
  --allow-commands       run the command of every command handler it serves (default: none)
  --allow-command H      run this Handler's command (repeatable)
  --command-env NAME[=VALUE]  pass NAME from the worker's environment (or set it) to the commands it runs
  --concurrency N        slots: attempts run at once (default ${DEFAULT_CONCURRENCY})
  --name NAME            the worker's name, a DNS label (default: the pod's name, else <host>-<pid>)
  --drain-grace D        on SIGTERM, how long running handlers may finish (default ${DEFAULT_DRAIN_GRACE_SECONDS}s)
  --metrics-port PORT    serve Prometheus metrics on this port (attempts, slots, results refused)
  --metrics-host ADDR    default 127.0.0.1 (this host only; 0.0.0.0 for a scraper elsewhere). Plain HTTP
  --no-events            no effect (the operator posts every Event); accepted so that scripts still work
  --log-level L          debug, info (default), warning or error
  -n, --namespace NS     default: the kubeconfig context's namespace, else "default"
  --kubeconfig FILE      default: KUBECONFIG, ~/.kube/config, else the pod's service account
  --context NAME         a context of the kubeconfig`;

/** Exit code 2: the message names what is wrong. */
export class BadInput extends Error {}

export interface Parsed {
  settings: Omit<Settings, 'namespace' | 'name'> & { namespace?: string; name?: string };
  modules: string[];
  kubeconfig?: string;
  context?: string;
  logLevel: 'debug' | 'info' | 'warning' | 'error';
  help: boolean;
  metricsPort?: number;
  metricsHost: string;
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

function wholeNumber(flag: string, text: string): number {
  if (!/^\s*[+-]?\d+\s*$/.test(text)) throw new BadInput(`argument ${flag}: '${text}' is not a whole number`);
  const value = Number(text);
  if (value < 1) throw new BadInput(`argument ${flag}: ${value} is not at least 1`);
  return value;
}

/** --command-env entries → the variables to pass, their values resolved now. */
export function commandEnv(entries: string[], environ: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {};
  for (const text of entries) {
    const at = text.indexOf('=');
    const name = at < 0 ? text : text.slice(0, at);
    if (!ENV_NAME.test(name)) throw new BadInput(`--command-env: '${text}' is not NAME or NAME=VALUE: a variable's name is letters, digits and '_', not starting with a digit`);
    if (name.startsWith('SEXTANT_')) throw new BadInput(`--command-env: ${name}: the SEXTANT_* variables are the attempt's own, set by the worker`);
    if (name === 'KUBECONFIG' && at < 0) throw new BadInput("--command-env: KUBECONFIG: the worker's own credentials are never passed to a command (give KUBECONFIG=PATH for a kubeconfig of the command's own)");
    if (at >= 0) out[name] = text.slice(at + 1);
    else if (environ[name] === undefined) throw new BadInput(`--command-env ${name}: the worker's environment has no ${name} (give ${name}=VALUE to set it)`);
    else out[name] = environ[name]!;
  }
  return out;
}

/** The command line → what to run; BadInput naming the flag for anything wrong. */
export function parse(argv: string[], environ: NodeJS.ProcessEnv = process.env): Parsed {
  let values: Record<string, any>;
  try {
    ({ values } = parseArgs({
      args: argv, allowPositionals: false, strict: true, options: {
        kubeconfig: { type: 'string' }, context: { type: 'string' }, namespace: { type: 'string', short: 'n' },
        module: { type: 'string', multiple: true }, queue: { type: 'string', multiple: true },
        handler: { type: 'string', multiple: true }, 'allow-commands': { type: 'boolean' },
        'allow-command': { type: 'string', multiple: true }, 'command-env': { type: 'string', multiple: true },
        concurrency: { type: 'string' }, name: { type: 'string' }, 'drain-grace': { type: 'string' },
        'no-events': { type: 'boolean' }, 'log-level': { type: 'string' }, config: { type: 'string' },
        'metrics-port': { type: 'string' }, 'metrics-host': { type: 'string' }, 'all-namespaces': { type: 'boolean', short: 'A' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (err) {
    throw new BadInput((err as Error).message);
  }
  const help = Boolean(values.help);
  if (values.config !== undefined) throw new BadInput(`--config ${values.config}: the Node worker does not read sextant.toml; give its [worker] settings as flags`);
  let metricsPort: number | undefined;
  if (values['metrics-port'] !== undefined) {
    metricsPort = Number(values['metrics-port']);
    if (!/^\d+$/.test(values['metrics-port']) || metricsPort < 1 || metricsPort > 65535) {
      throw new BadInput(`argument --metrics-port: '${values['metrics-port']}' is not a port (1 to 65535)`);
    }
  }
  if (values['all-namespaces']) throw new BadInput('-A/--all-namespaces cannot be used with a worker: a worker serves one namespace (use -n NAMESPACE)');
  if (values.name !== undefined) {
    const problem = nameProblem(values.name);
    if (problem) throw new BadInput(problem);
  }
  try {
    if (values.namespace !== undefined) namespaceName('--namespace', values.namespace);
    for (const q of values.queue ?? []) objectName('--queue', q, 'queue name');
    for (const h of values.handler ?? []) objectName('--handler', h, 'handler name');
    for (const h of values['allow-command'] ?? []) objectName('--allow-command', h, 'handler name');
  } catch (err) {
    if (err instanceof InputError) throw new BadInput(err.message);
    throw err;
  }
  if (values['allow-commands'] && values['allow-command']) {
    throw new BadInput(`--allow-commands runs every command handler; --allow-command ${values['allow-command'][0]} names some: give one of the two`);
  }
  let drainGrace = DEFAULT_DRAIN_GRACE_SECONDS;
  if (values['drain-grace'] !== undefined) {
    try {
      drainGrace = parseDuration(values['drain-grace']);
    } catch (err) {
      throw new BadInput(`argument --drain-grace: ${(err as Error).message}`);
    }
  }
  const logLevel = values['log-level'] ?? 'info';
  if (!isLevel(logLevel)) throw new BadInput(`--log-level ${logLevel}: use debug, info, warning or error`);
  return {
    settings: {
      namespace: values.namespace, name: values.name,
      concurrency: values.concurrency === undefined ? DEFAULT_CONCURRENCY : wholeNumber('--concurrency', values.concurrency),
      drainGraceSeconds: drainGrace,
      wantQueues: values.queue ? new Set(values.queue) : undefined,
      wantHandlers: values.handler ? new Set(values.handler) : undefined,
      allowCommands: values['allow-commands'] ? true : new Set(values['allow-command'] ?? []),
      commandEnv: commandEnv(values['command-env'] ?? [], environ),
    },
    modules: values.module ?? [], kubeconfig: values.kubeconfig, context: values.context, logLevel, help,
    metricsPort, metricsHost: values['metrics-host'] ?? '127.0.0.1',
  };
}

/** Import a --module: a path (relative to the current directory) or a package name resolved from it. */
export async function importModule(spec: string, cwd = process.cwd()): Promise<void> {
  let url: string;
  if (spec.startsWith('.') || spec.startsWith('/') || /\.[cm]?js$/.test(spec)) {
    const file = resolve(cwd, spec);
    if (!existsSync(file)) throw new BadInput(`--module ${spec}: no such file (${file})`);
    url = pathToFileURL(file).href;
  } else {
    try {
      url = pathToFileURL(createRequire(join(cwd, 'package.json')).resolve(spec)).href;
    } catch {
      throw new BadInput(`--module ${spec}: no such module (a package name is looked for in node_modules from ${cwd}; give a path such as ./${spec}.js for a file)`);
    }
  }
  try {
    await import(url);
  } catch (err) {
    const e = err as Error;
    process.stderr.write(`${e?.stack ?? String(err)}\n`);
    throw new BadInput(`--module ${spec} does not load: ${e?.name ?? 'Error'}: ${e?.message ?? String(err)}`);
  }
}

function error(message: string): void {
  process.stderr.write(`error: ${message}\n`);
}

export async function main(argv: string[]): Promise<number> {
  let parsed: Parsed;
  try {
    parsed = parse(argv);
    if (parsed.help) {
      process.stdout.write(`${USAGE}\n`);
      return 0;
    }
    for (const module of parsed.modules) await importModule(module);
  } catch (err) {
    if (err instanceof BadInput) {
      error(err.message);
      return 2;
    }
    throw err;
  }
  let kube: Kube;
  try {
    kube = Kube.load({ kubeconfig: parsed.kubeconfig, context: parsed.context });
  } catch (err) {
    error(`cannot load the kubeconfig: ${(err as Error).message}`);
    return 2;
  }
  const namespace = parsed.settings.namespace ?? kube.namespace ?? 'default';
  const settings: Settings = { ...parsed.settings, namespace, name: parsed.settings.name ?? defaultName() };
  const functions = new Map([...definedHandlers()].map(([name, h]) => [name, h.fn]));
  const worker = new Worker(kube, settings, functions, parsed.logLevel);
  try {
    await worker.start();
  } catch (err) {
    if (err instanceof PlanError) {
      error(err.message);
      return 2;
    }
    if (err instanceof ApiError) {
      error(`cannot read the Queues and Handlers of namespace ${namespace} at ${kube.server.origin}: ${err.message}`);
      return 1;
    }
    throw err;
  }
  if (parsed.metricsPort !== undefined) {
    try {
      await worker.service.metrics.serve(parsed.metricsPort, parsed.metricsHost);
    } catch (err) {
      error(`--metrics-port ${parsed.metricsPort}: cannot listen on ${parsed.metricsHost}: ${(err as Error).message}`);
      return 1;
    }
  }
  for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, () => worker.stop());
  try {
    await worker.run();
    return 0;
  } catch (err) {
    error(`worker ${settings.name}: ${(err as Error).message}`);
    return 1;
  }
}
