// Handlers: defineHandler(name, fn) registers a function under its Handler's name, as the Python SDK's
// @sextant.sdk.handler does. The registry lives on globalThis under a registered Symbol so that a handlers module
// and the worker agree on it even when they load two copies of this package.
import { objectName, shortNumber, snoozeSeconds } from './common.js';
import { PROTOCOL } from './generated/protocol.js';
import type { JobsApi } from './client.js';

/** The job an attempt runs. */
export interface Job<P = Record<string, any>> {
  /** job_8f3k2m9q */
  readonly id: string;
  /** job-8f3k2m9q, the object's name */
  readonly name: string;
  readonly namespace: string;
  readonly queue: string;
  readonly handler: string;
  /** 1 for the first attempt */
  readonly attempt: number;
  readonly payload: P;
  /** RFC 3339: a Schedule's tick, else runAt, else its creation */
  readonly scheduledAt: string;
}

/** What a handler gets besides its job. */
export interface Context {
  /** Aborted when the worker stops the attempt: a cancel, a timeout, a drain, or the worker losing its lease.
   * Its reason says which ('Cancelled', 'Timeout', 'Drained', 'Lost'). */
  readonly signal: AbortSignal;
  /** signal.aborted, as the Python SDK's ctx.cancelled says it. */
  readonly cancelled: boolean;
  /** Run the job again after `delay` ('30s', or seconds) without counting this attempt: throws a Snooze (nothing
   * after it runs). */
  snooze(delay: string | number): never;
  /** How far the handler has come: a fraction from 0 to 1 and a short message (at most 200 characters). Cheap to
   * call often: the latest rides on the worker's next write, and the job shows it while it runs. */
  progress(fraction: number, message?: string): void;
  /** Create the next job (chaining): ctx.jobs.create({queue, handler, payload, idempotencyKey, concurrencyKey}),
   * or many: ctx.jobs.createMany([...]); read one: ctx.jobs.get(id) (its status has state, output, progress) and
   * ctx.jobs.output(id) (what its handler returned). */
  readonly jobs: Pick<JobsApi, 'create' | 'createMany' | 'get' | 'output'>;
}

export type HandlerFunction<P = any> = (job: Job<P>, ctx: Context) => unknown | Promise<unknown>;

const BRAND = Symbol.for('@sextant/node.handler');
const REGISTRY = Symbol.for('@sextant/node.handlers');

export interface Handler<P = any> {
  readonly name: string;
  readonly fn: HandlerFunction<P>;
  readonly [BRAND]: true;
}

/** Thrown by a handler whose attempt failed for good (bad input, a refused card): the job ends dead, not retried. */
export class NonRetryableError extends Error {
  constructor(message?: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'NonRetryableError';
  }
}

/** Thrown to run the job again after `delay` ('30s', or seconds; at most 7 days) without counting this attempt:
 * the job goes `scheduled` (at most 100 snoozes per job; past that a snooze counts as a failed attempt).
 * ctx.snooze(delay) throws it; so can a handler: `throw new Snooze(30)`. A bad delay throws at the call. */
export class Snooze extends Error {
  readonly seconds: number;

  constructor(delay: string | number) {
    const seconds = snoozeSeconds(delay);
    super(`snoozed for ${shortNumber(seconds)}s`);
    this.seconds = seconds;
    this.name = 'Snooze';
  }
}

/** The exit code an attempt reports for NonRetryableError (the operator never retries it). */
export const NON_RETRYABLE_EXIT_CODE = PROTOCOL.nonRetryableExitCode;

function registry(): Map<string, Handler> {
  const g = globalThis as any;
  g[REGISTRY] ??= new Map<string, Handler>();
  return g[REGISTRY];
}

/** Register `fn` as the handler `name` (its Handler object's name). Defining one name twice is an error. */
export function defineHandler<P = any>(name: string, fn: HandlerFunction<P>): Handler<P> {
  objectName('defineHandler', name, 'handler name');
  if (typeof fn !== 'function') throw new TypeError(`defineHandler('${name}', fn): fn must be a function`);
  const known = registry().get(name);
  if (known && known.fn !== fn) throw new Error(`handler '${name}' is defined twice`);
  const handler = known ?? Object.freeze({ name, fn, [BRAND]: true as const });
  registry().set(name, handler);
  return handler as Handler<P>;
}

export function isHandler(value: unknown): value is Handler {
  return typeof value === 'object' && value !== null && (value as any)[BRAND] === true;
}

/** Every handler defined so far, by name. */
export function definedHandlers(): Map<string, Handler> {
  return new Map(registry());
}
