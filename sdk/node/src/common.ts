// What people type and what Sextant writes, checked and spelled as the Python side does (operator/sextant/resources:
// common.py, inputs.py, job.py), so that a Node client and a Python one agree on every name, id and refusal. The
// numbers, patterns and words are protocol.json's (generated/protocol.ts), the one definition both sides read.
import { createHash } from 'node:crypto';
import { PROTOCOL } from './generated/protocol.js';

export const NAME_MAX = PROTOCOL.nameMax;
const NAME_RE = new RegExp(PROTOCOL.namePattern);
const NAMESPACE_RE = new RegExp(PROTOCOL.namespacePattern);
const JOB_ID_RE = new RegExp(PROTOCOL.jobIdPattern);
const DURATION_RE = new RegExp(PROTOCOL.durationPattern);
const PART_RE = /([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)/g;
const UNIT_SECONDS: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600 };
const MAX_DURATION_SECONDS = PROTOCOL.maxDurationHours * 3600;
export const ID_ALPHABET = PROTOCOL.idAlphabet;
export const ID_LENGTH = PROTOCOL.idLength;
export const PAYLOAD_MAX_BYTES = PROTOCOL.payloadMaxBytes;
export const PAYLOAD_ENV_MAX_BYTES = PROTOCOL.payloadEnvMaxBytes;
export const MAX_PAYLOAD_DEPTH = PROTOCOL.maxPayloadDepth;
export const KEY_MAX = PROTOCOL.keyMax;
export const PRIORITY_MIN = PROTOCOL.priorityMin;
export const PRIORITY_MAX = PROTOCOL.priorityMax;
export const IDEMPOTENCY_WINDOW_MS = PROTOCOL.idempotencyWindowHours * 3600 * 1000;
export const IDEMPOTENCY_WINDOW_ENV = PROTOCOL.idempotencyWindowEnv;

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
  if (!(seconds <= MAX_DURATION_SECONDS)) throw new Error(`${show(text)} is longer than the maximum duration, ${PROTOCOL.maxDurationHours}h`);
  return seconds;
}

/** A command exits with this code to snooze (the delay in $SEXTANT_SNOOZE_FILE); Snooze reports it too. */
export const SNOOZE_EXIT_CODE = PROTOCOL.snoozeExitCode;
const MAX_SNOOZE_SECONDS = PROTOCOL.maxSnoozeDays * 24 * 3600;

/** A snooze's delay in seconds: a duration ("30s", "5m") or a number of seconds, from 0 to 7 days
 * (report.snooze_seconds); an Error naming the rule otherwise. */
export function snoozeSeconds(delay: unknown): number {
  let seconds: number;
  if (typeof delay === 'number') seconds = delay;
  else if (typeof delay === 'string') {
    const text = delay.trim();
    seconds = text !== '' && Number.isFinite(Number(text)) ? Number(text) : parseDuration(text);
  } else {
    throw new TypeError(`snooze: the delay must be a duration such as "30s" or a number of seconds, not ${delay === null ? 'null' : typeof delay}`);
  }
  if (!Number.isFinite(seconds) || seconds < 0 || seconds > MAX_SNOOZE_SECONDS) {
    throw new RangeError(`snooze: the delay must lie from 0s to ${PROTOCOL.maxSnoozeDays} days, not ${show(delay)}`);
  }
  return seconds;
}

/** Progress: a fraction in [0, 1] and a short message (resources/report.py). */
export const PROGRESS_MESSAGE_MAX = PROTOCOL.progressMessageMax;

export function clipProgressMessage(message: unknown): string | undefined {
  if (message === undefined || message === null) return undefined;
  const text = String(message);
  return text.length <= PROGRESS_MESSAGE_MAX ? text : `${text.slice(0, PROGRESS_MESSAGE_MAX - 1)}…`;
}

/** A progress fraction: a number from 0 to 1; a RangeError naming the rule otherwise. */
export function checkFraction(fraction: unknown): number {
  if (typeof fraction !== 'number' || !Number.isFinite(fraction) || fraction < 0 || fraction > 1) {
    throw new RangeError(`progress: the fraction must be a number from 0 to 1, not ${show(fraction)}`);
  }
  return fraction;
}

/** A command's progress file's line: "0.4 resized 4/10" (the fraction, then an optional message). */
export function parseProgressLine(text: string): [number, string | undefined] {
  const line = text.trim();
  const space = line.indexOf(' ');
  const head = space < 0 ? line : line.slice(0, space);
  const rest = space < 0 ? '' : line.slice(space + 1).trim();
  const fraction = head !== '' && Number.isFinite(Number(head)) ? Number(head) : NaN;
  if (Number.isNaN(fraction)) {
    throw new Error(`progress: SEXTANT_PROGRESS_FILE must start with a fraction from 0 to 1, not ${show(head.slice(0, 40))}`);
  }
  return [checkFraction(fraction), clipProgressMessage(rest || undefined)];
}

/** Seconds as Python's format :g writes them (30 → '30', 0.5 → '0.5'). */
export function shortNumber(value: number): string {
  return String(Number(value.toPrecision(6)));
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
function checkJson(field: string, value: unknown, depth: number, limit = MAX_PAYLOAD_DEPTH): number {
  if (depth > limit) throw new InputError(field, `the payload nests deeper than ${limit} levels`);
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return depth;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new InputError(field, `${value} is not a JSON number`);
    return depth;
  }
  if (Array.isArray(value)) return Math.max(depth, ...value.map((v) => checkJson(field, v, depth + 1, limit)));
  if (typeof value === 'object' && Object.getPrototypeOf(value) !== null && value.constructor === Object
      || (typeof value === 'object' && Object.getPrototypeOf(value) === null)) {
    return Math.max(depth, ...Object.values(value as object).filter((v) => v !== undefined).map((v) => checkJson(field, v, depth + 1, limit)));
  }
  throw new InputError(field, `the payload must be JSON: ${kindOf(value)} (${Object.prototype.toString.call(value)}) is not`);
}

/** The output's cap, as compact UTF-8 JSON: over it the output is not kept and status.outputNote says why
 * (resources/report.py). */
export const OUTPUT_MAX_BYTES = PROTOCOL.outputMaxBytes;
const OUTPUT_MAX_DEPTH = PROTOCOL.outputMaxDepth;

/** A handler's return value as compact JSON, or why it is not kept (report.output_json): { json } or { note };
 * {} for no output (undefined or null). */
export function outputJson(value: unknown, limit = OUTPUT_MAX_BYTES): { json?: string; note?: string } {
  if (value === undefined || value === null) return {};
  try {
    checkJson('output', value, 1, OUTPUT_MAX_DEPTH);
  } catch (err) {
    const rule = (err as InputError).rule ?? String(err);
    if (rule.includes('nests deeper')) return { note: `the output nests deeper than ${OUTPUT_MAX_DEPTH} levels; not kept` };
    return { note: `the output is not JSON (${rule.replace(/^the payload must be JSON: /, '')}); not kept` };
  }
  const json = JSON.stringify(value);
  const size = Buffer.byteLength(json);
  if (size > limit) return { note: `the output is ${size} bytes as JSON, over the cap of ${limit} bytes; not kept` };
  return { json };
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

export const CONCURRENCY_KEY_MAX = PROTOCOL.concurrencyKeyMax;

/** A job's concurrency key (spec.concurrencyKey): a tenant, a customer id. */
export function concurrencyKey(field: string, value: unknown): string {
  if (typeof value !== 'string' || !value) throw new InputError(field, 'a concurrency key must not be empty');
  if (value.length > CONCURRENCY_KEY_MAX) throw new InputError(field, `a concurrency key has at most ${CONCURRENCY_KEY_MAX} characters, got ${value.length}`);
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
  const text = env[IDEMPOTENCY_WINDOW_ENV];
  if (!text) return IDEMPOTENCY_WINDOW_MS;
  let seconds: number;
  try {
    seconds = parseDuration(text);
  } catch (err) {
    throw new Error(`${IDEMPOTENCY_WINDOW_ENV}: ${(err as Error).message}`);
  }
  if (seconds <= 0) throw new Error(`${IDEMPOTENCY_WINDOW_ENV}: the idempotency window must be longer than 0s, got '${text}'`);
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
