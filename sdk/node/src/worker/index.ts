// A worker in your own Node program (createWorker) and the pieces `sextant-worker` shares with it.
import { namespaceName } from '../common.js';
import { PROTOCOL } from '../generated/protocol.js';
import { ConnectOptions, Kube } from '../kube.js';
import { definedHandlers, isHandler, type Handler, type HandlerFunction } from '../handlers.js';
import { Level, logger } from './log.js';
import { defaultName, nameProblem } from './registration.js';
import { Settings, WorkerService } from './service.js';

export { PlanError } from './plan.js';

export const DEFAULT_CONCURRENCY = PROTOCOL.workerConcurrency;
export const DEFAULT_DRAIN_GRACE_SECONDS = PROTOCOL.workerDrainGraceSeconds;

/** The worker stopped on its own: another process registered under its name. */
export class WorkerStopped extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'WorkerStopped';
  }
}

export interface WorkerOptions extends ConnectOptions {
  /** The handlers it serves: defineHandler() results, or { name: fn }. Default: every handler defined so far. */
  handlers?: Handler[] | Record<string, HandlerFunction>;
  /** The queues it serves; default every Queue of the namespace, as they come and go. */
  queues?: string[];
  /** Attempts run at once (default 8). */
  concurrency?: number;
  /** Default: the kubeconfig context's namespace, else "default". */
  namespace?: string;
  /** A DNS label; default the pod's name, else <host>-<pid>. */
  name?: string;
  /** Seconds running handlers get to finish after stop() (default 25). */
  drainGrace?: number;
  logLevel?: Level;
}

function functionsOf(handlers: WorkerOptions['handlers']): Map<string, HandlerFunction> {
  if (handlers === undefined) return new Map([...definedHandlers()].map(([name, h]) => [name, h.fn]));
  if (Array.isArray(handlers)) {
    const out = new Map<string, HandlerFunction>();
    for (const [i, h] of handlers.entries()) {
      if (!isHandler(h)) throw new TypeError(`handlers[${i}]: not a handler: give defineHandler(name, fn)'s result, or { name: fn }`);
      if (out.has(h.name) && out.get(h.name) !== h.fn) throw new Error(`handler '${h.name}' is defined twice`);
      out.set(h.name, h.fn);
    }
    return out;
  }
  if (handlers === null || typeof handlers !== 'object') throw new TypeError('handlers: give an array of defineHandler() results, or { name: fn }');
  for (const [name, fn] of Object.entries(handlers)) {
    if (typeof fn !== 'function') throw new TypeError(`handlers.${name}: must be a function`);
  }
  return new Map(Object.entries(handlers));
}

/** One worker: start() reads and checks what it serves, run() registers and serves until stop() has drained it. */
export class Worker {
  readonly service: WorkerService;

  constructor(kube: Kube, settings: Settings, functions: Map<string, HandlerFunction>, logLevel: Level = 'info') {
    this.service = new WorkerService(kube, settings, functions, logger(logLevel));
  }

  get name(): string {
    return this.service.name;
  }

  get namespace(): string {
    return this.service.namespace;
  }

  private started: Promise<void> | undefined;

  /** Read the namespace's Queues and Handlers, check what to serve (PlanError naming what is wrong). */
  start(): Promise<void> {
    this.started ??= this.service.start();
    return this.started;
  }

  /** Register and serve until stop() has drained it; WorkerStopped when another process took its name over. */
  async run(): Promise<void> {
    await this.start();
    const code = await this.service.run();
    if (code !== 0) throw new WorkerStopped(`worker ${this.name}: ${this.service.takenOverReason ?? 'stopped'}`);
  }

  /** Drain: take nothing new, let running handlers finish within drainGrace, stop the rest, deregister; run() then
   * returns. A second stop() skips what is left of the grace. */
  stop(): void {
    this.service.drain();
  }
}

/** A worker serving the functions given, inside your own program (it installs no signal handlers). */
export function createWorker(options: WorkerOptions = {}): Worker {
  const { concurrency = DEFAULT_CONCURRENCY, drainGrace = DEFAULT_DRAIN_GRACE_SECONDS } = options;
  if (options.name !== undefined) {
    const problem = nameProblem(options.name);
    if (problem) throw new Error(problem.replace('--name', 'name'));
  }
  if (!Number.isInteger(concurrency) || concurrency < 1) throw new Error(`concurrency: must be a whole number of at least 1, not ${concurrency}`);
  if (typeof drainGrace !== 'number' || !(drainGrace >= 0)) throw new Error(`drainGrace: must be 0 seconds or more, not ${drainGrace}`);
  const functions = functionsOf(options.handlers);
  const kube = Kube.load(options);
  const namespace = namespaceName('namespace', options.namespace ?? kube.namespace ?? 'default');
  const settings: Settings = {
    namespace, name: options.name ?? defaultName(), concurrency, drainGraceSeconds: drainGrace,
    wantQueues: options.queues ? new Set(options.queues) : undefined, wantHandlers: new Set(functions.keys()),
    allowCommands: false, commandEnv: {},
  };
  return new Worker(kube, settings, functions, options.logLevel);
}
