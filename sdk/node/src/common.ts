// What people type and what Sextant writes, checked and spelled as the Python side does (operator/sextant/resources:
// common.py, inputs.py, job.py), so that a Node client and a Python one agree on every name, id and refusal.
import { createHash } from 'node:crypto';

export const NAME_MAX = 63;
const NAME_RE = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;
const NAMESPACE_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const JOB_ID_RE = /^[a-z0-9]([-_.a-z0-9]*[a-z0-9])?$/;
const DURATION_RE = /^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$/;
const PART_RE = /([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)/g;
const UNIT_SECONDS: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600 };
const MAX_DURATION_SECONDS = 87600 * 3600;
export const ID_ALPHABET = '23456789abcdefghjkmnpqrstuvwxyz';
export const ID_LENGTH = 8;
export const PAYLOAD_MAX_BYTES = 256 * 1024;
export const MAX_PAYLOAD_DEPTH = 100;
export const KEY_MAX = 253;
export const PRIORITY_MIN = -(2 ** 31);
export const PRIORITY_MAX = 2 ** 31 - 1;
export const IDEMPOTENCY_WINDOW_MS = 24 * 3600 * 1000;

/** Bad input: `field` names what was wrong (an option, a flag), `message` the rule. */
export class InputError extends Error {
  constructor(readonly field: string, readonly rule: string) {
    super(`${field}: ${rule}`);
    this.name = 'InputError';
  }
}

const show = (value: unknown): string => (typeof value === 'string' ? `'${value}'` : JSON.stringify(value) ?? String(value));

/** '1h30m' → seconds; an Error naming the rule for anything else. */
export function parseDuration(text: string): number {
  if (typeof text !== 'string' || text.length > 64 || !DURATION_RE.test(text)) {
    throw new Error(`${show(typeof text === 'string' ? text.slice(0, 40) : text)} is not a duration: use a number and a unit (ms, s, m, h), e.g. "30s" or "1h30m"`);
  }
  let seconds = 0;
  for (const [, n, unit] of text.matchAll(PART_RE)) seconds += Number(n) * UNIT_SECONDS[unit];
  if (!(seconds <= MAX_DURATION_SECONDS)) throw new Error(`${show(text)} is longer than the maximum duration, 87600h`);
  return seconds;
}

/** RFC 3339 in UTC with microseconds (metav1.MicroTime), as the Python worker writes times. */
export function formatTime(moment: Date, precise = true): string {
  const iso = moment.toISOString(); // 2026-12-03T08:41:07.412Z
  return precise ? iso.replace(/\.(\d{3})Z$/, '.$1000Z') : iso.replace(/\.\d{3}Z$/, 'Z');
}

export function objectName(field: string, value: unknown, what = 'name'): string {
  if (typeof value !== 'string' || !value) throw new InputError(field, `a ${what} is required`);
  if (value.length > NAME_MAX || !NAME_RE.test(value)) {
    throw new InputError(field, `${show(value)} is not a valid ${what}: use lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most ${NAME_MAX} characters`);
  }
  return value;
}

export function namespaceName(field: string, value: unknown): string {
  if (typeof value !== 'string' || !value) throw new InputError(field, 'a namespace is required');
  if (value.length > NAME_MAX || !NAMESPACE_RE.test(value)) {
    throw new InputError(field, `${show(value)} is not a valid namespace: use lower-case letters, digits and '-', starting and ending with a letter or digit, at most ${NAME_MAX} characters`);
  }
  return value;
}

/** A job id in either spelling (job_8f3k2m9q, job-8f3k2m9q) → the object's name. */
export function jobName(field: string, value: unknown): string {
  if (typeof value !== 'string' || !value) throw new InputError(field, 'a job id is required, e.g. job_8f3k2m9q');
  if (value.length > NAME_MAX || !JOB_ID_RE.test(value)) {
    throw new InputError(field, `${show(value)} is not a job id: ids look like job_8f3k2m9q (lower-case letters, digits, '-', '_' or '.', at most ${NAME_MAX} characters)`);
  }
  return value.replace(/_/g, '-');
}

/** The id users see (job_8f3k2m9q) for the object job-8f3k2m9q. */
export function jobId(name: string): string {
  return name.startsWith('job-') ? `job_${name.slice(4)}` : name;
}

/** The payload as its size is measured and the handler reads it: compact JSON, UTF-8. */
export function payloadJson(payload: unknown): string {
  return JSON.stringify(payload);
}

function kindOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return { string: 'a string', number: 'a number', boolean: 'a boolean', bigint: 'a number' }[typeof value as string] ?? typeof value;
}

/** Depth of nesting, and that every value is JSON (no undefined inside arrays, no NaN, no BigInt, no functions). */
function checkJson(field: string, value: unknown, depth: number): number {
  if (depth > MAX_PAYLOAD_DEPTH) throw new InputError(field, `the payload nests deeper than ${MAX_PAYLOAD_DEPTH} levels`);
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return depth;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new InputError(field, `${value} is not a JSON number`);
    return depth;
  }
  if (Array.isArray(value)) return Math.max(depth, ...value.map((v) => checkJson(field, v, depth + 1)));
  if (typeof value === 'object' && Object.getPrototypeOf(value) !== null && value.constructor === Object
      || (typeof value === 'object' && Object.getPrototypeOf(value) === null)) {
    return Math.max(depth, ...Object.values(value as object).filter((v) => v !== undefined).map((v) => checkJson(field, v, depth + 1)));
  }
  throw new InputError(field, `the payload must be JSON: ${kindOf(value)} (${Object.prototype.toString.call(value)}) is not`);
}

/** A JSON object within the size cap: the one check of every create path. */
export function checkPayload(field: string, value: unknown): Record<string, unknown> {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new InputError(field, `the payload must be a JSON object ({...}), got ${kindOf(value)}`);
  }
  checkJson(field, value, 1);
  const size = Buffer.byteLength(payloadJson(value));
  if (size > PAYLOAD_MAX_BYTES) {
    throw new InputError(field, `the payload is ${size} bytes as JSON, over the limit of ${PAYLOAD_MAX_BYTES} bytes (256 KiB); pass a reference (an object key, a URL) to larger data instead`);
  }
  return value as Record<string, unknown>;
}

export function idempotencyKey(field: string, value: unknown): string {
  if (typeof value !== 'string' || !value) throw new InputError(field, 'an idempotency key must not be empty');
  if (value.length > KEY_MAX) throw new InputError(field, `an idempotency key has at most ${KEY_MAX} characters, got ${value.length}`);
  return value;
}

export function priority(field: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value)) throw new InputError(field, `the priority must be an integer, got ${show(value)}`);
  if (value < PRIORITY_MIN || value > PRIORITY_MAX) throw new InputError(field, `the priority must be between ${PRIORITY_MIN} and ${PRIORITY_MAX}`);
  return value;
}

/** The name of a job with this key in this namespace, for the n-th use of the key (lifecycle/idempotency.py). */
export function keyedName(namespace: string, key: string, generation = 0): string {
  const digest = createHash('sha256').update(`${namespace}\0${key}\0${generation}`, 'utf8').digest();
  let n = digest.readBigUInt64BE(0);
  const base = BigInt(ID_ALPHABET.length);
  let out = '';
  for (let i = 0; i < ID_LENGTH; i++) {
    out += ID_ALPHABET[Number(n % base)];
    n /= base;
  }
  return `job-${out}`;
}

export function randomName(): string {
  const bytes = new Uint8Array(ID_LENGTH * 2);
  crypto.getRandomValues(bytes);
  let out = '';
  for (const b of bytes) {
    if (b >= 248) continue; // 248 = 8 × 31: no bias
    out += ID_ALPHABET[b % ID_ALPHABET.length];
    if (out.length === ID_LENGTH) break;
  }
  return out.length === ID_LENGTH ? `job-${out}` : randomName();
}

/** How long an idempotency key stays claimed: 24 h, or SEXTANT_IDEMPOTENCY_WINDOW (as the operator is told). */
export function idempotencyWindowMs(env: NodeJS.ProcessEnv = process.env): number {
  const text = env.SEXTANT_IDEMPOTENCY_WINDOW;
  if (!text) return IDEMPOTENCY_WINDOW_MS;
  let seconds: number;
  try {
    seconds = parseDuration(text);
  } catch (err) {
    throw new Error(`SEXTANT_IDEMPOTENCY_WINDOW: ${(err as Error).message}`);
  }
  if (seconds <= 0) throw new Error(`SEXTANT_IDEMPOTENCY_WINDOW: the idempotency window must be longer than 0s, got '${text}'`);
  return seconds * 1000;
}

/** A field selector's value, escaped as the API server reads it. */
export function selectorValue(text: string): string {
  return text.replace(/\\/g, '\\\\').replace(/,/g, '\\,').replace(/=/g, '\\=');
}

/** A job's scheduled time: a Schedule's tick, else runAt, else its creation (lifecycle/reading.py). */
export function scheduledAtOf(raw: any): string {
  const tick = raw?.metadata?.annotations?.['sextant.dev/scheduled-at'];
  if (tick) return tick;
  const when = raw?.spec?.runAt ?? raw?.metadata?.creationTimestamp;
  return when ? formatTime(new Date(when), false) : '';
}
