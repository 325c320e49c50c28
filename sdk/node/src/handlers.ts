// Handlers: defineHandler(name, fn) registers a function under its Handler's name, as the Python SDK's
// @sextant.sdk.handler does. The registry lives on globalThis under a registered Symbol so that a handlers module
// and the worker agree on it even when they load two copies of this package.
import { objectName } from './common.js';
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
  /** Create the next job (chaining): ctx.jobs.create({queue, handler, payload, idempotencyKey}). */
  readonly jobs: Pick<JobsApi, 'create'>;
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

/** The exit code an attempt reports for NonRetryableError (the operator never retries it). */
export const NON_RETRYABLE_EXIT_CODE = 86;

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
