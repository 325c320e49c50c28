// A client for Node apps that enqueue: new Sextant({ namespace }).jobs.create/get/list/cancel/retry, the bulk
// cancelMatching/retryMatching and .queues.pause/resume, with the Python client's validation, idempotency rule and
// refusals (operator/sextant/client.py, lifecycle/idempotency.py, lifecycle/selection.py).
import {
  InputError, checkPayload, concurrencyKey, formatTime, idempotencyKey, idempotencyWindowMs, jobId, jobName, keyedName,
  namespaceName, objectName, priority as checkPriority, randomName, selectorValue,
} from './common.js';
import { JOB_STATUS_DEFAULTS, type JobStatus } from './generated/wire.js';
import { API_VERSION, ApiError, ConnectOptions, Kube, Obj, path } from './kube.js';

export interface CreateJob<P = Record<string, unknown>> {
  queue: string;
  handler: string;
  payload?: P;
  /** A second create with this key within 24 h returns the first job instead of creating another. */
  idempotencyKey?: string;
  /** When to run it (default: now). */
  runAt?: Date | string;
  priority?: number;
  /** Its concurrency key (spec.concurrencyKey), e.g. a tenant: the queue's perKeyConcurrency limits running
   * attempts per key, and keys take turns. */
  concurrencyKey?: string;
  /** Another namespace than the client's. */
  namespace?: string;
}

/** One item of createMany: the job (created, or the one already holding its idempotency key), or why not. */
export interface CreateResult {
  /** The job's id, or that of the job already holding its key; undefined with an error. */
  id?: string;
  created: boolean;
  /** KeyConflict, or the API server's refusal (Refused). */
  error?: Error;
  /** As the HTTP API answers one create: 201 created, 200 the key's job, 409 a key conflict, else the API
   * server's status. */
  status: number;
  job?: JobRecord;
}

/** How many creates createMany has under way at once, and how often it sends one the API server answered 429. */
const CONCURRENCY = 8;
const TOO_MANY_TRIES = 5;

interface Prepared { namespace: string; spec: Obj; key?: string }

export interface JobRecord {
  /** job_8f3k2m9q */
  id: string;
  /** job-8f3k2m9q */
  name: string;
  namespace: string;
  queue: string;
  handler: string;
  payload: Record<string, any>;
  priority: number;
  idempotencyKey?: string;
  runAt?: string;
  concurrencyKey?: string;
  /** scheduled, queued, running, succeeded, failed, dead or cancelled; '' before the operator has seen it */
  state: string;
  attempt: number;
  createdAt: string;
  /** What its handler returned (status.output), once it succeeded. */
  output?: unknown;
  /** Why its output was not kept. */
  outputNote?: string;
  /** How far its running attempt has come: { fraction, message, sequence, updatedAt }. */
  progress?: Obj;
  /** create(): false when an idempotency key returned an existing job */
  created?: boolean;
  /** The Job object as the API server returned it. */
  object: Obj;
}

export interface ListJobs {
  state?: string;
  queue?: string;
  handler?: string;
  namespace?: string;
}

/** What a bulk cancel or retry asked for: the ids it asked, and those the API server refused with its reason. */
export interface BulkOutcome {
  requested: string[];
  refused: { id: string; reason: string }[];
}

// The states each bulk verb applies to (the Job CRD's CEL rules; lifecycle/selection.py in Python).
type State = NonNullable<JobStatus['state']>; // the Job CRD's enum: a state misspelled here does not compile
const CANCELLABLE: string[] = ['scheduled', 'queued', 'running', 'failed'] satisfies State[];
const RETRYABLE: string[] = ['failed', 'dead'] satisfies State[];

function listed(states: string[]): string {
  return `${states.slice(0, -1).join(', ')} or ${states[states.length - 1]}`;
}

/** Something the API server refused or could not serve, in one line that says what and where. */
export class Refused extends Error {
  constructor(message: string, readonly status = 0) {
    super(message);
    this.name = 'Refused';
  }
}

/** A create whose idempotency key is held by a job with another queue, handler or payload: nothing is created. */
export class KeyConflict extends Refused {
  constructor(readonly key: string, readonly job: string, readonly fields: string[], held: Obj, wanted: Obj) {
    const what = fields.map((f) => `spec.${f} (${shown(field(held, f))}, not ${shown(field(wanted, f))})`).join(' and ');
    super(`idempotency key '${key}' is held by job ${job} with another ${what}: a key names one job within its window; give another job another key`, 409);
    this.name = 'KeyConflict';
  }
}

const SAME_JOB = ['queue', 'handler', 'payload'];
const STATES: string[] = ['scheduled', 'queued', 'running', 'succeeded', 'failed', 'dead', 'cancelled'] satisfies State[];
const REFUSAL = /(?:^|: )Forbidden: (cannot (?:cancel|retry): .*?)(?:, <nil>)?$/;

const field = (spec: Obj, f: string) => (f === 'payload' ? spec[f] ?? {} : spec[f]);

function shown(value: unknown, limit = 40): string {
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  return text.length <= limit ? text : `${text.slice(0, limit - 1)}…`;
}

/** JSON equality (true is not 1; 1 is 1.0). */
function sameJson(a: any, b: any): boolean {
  if (typeof a === 'boolean' || typeof b === 'boolean') return a === b;
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((v, i) => sameJson(v, b[i]));
  }
  if (a && b && typeof a === 'object' && typeof b === 'object') {
    const ka = Object.keys(a), kb = Object.keys(b);
    return ka.length === kb.length && ka.every((k) => k in b && sameJson(a[k], b[k]));
  }
  return a === b;
}

export function differences(held: Obj, wanted: Obj): string[] {
  return SAME_JOB.filter((f) => !sameJson(field(held, f), field(wanted, f)));
}

type Candidate = [number, boolean, string]; // creation (ms), undecided, name

function compare(a: Candidate, b: Candidate): number {
  return a[0] - b[0] || Number(a[1]) - Number(b[1]) || (a[2] < b[2] ? -1 : a[2] > b[2] ? 1 : 0);
}

/** Of the jobs carrying one key, the one holding it now (lifecycle/idempotency.holder). */
export function holder(candidates: Candidate[], now: number, windowMs: number): string | undefined {
  let current: Candidate | undefined;
  for (const other of [...candidates].sort(compare)) {
    if (!current || !(other[0] - current[0] < windowMs)) current = other;
  }
  return current && now - current[0] < windowMs ? current[2] : undefined;
}

// What a status the operator's lifecycle never wrote may hold: the CRD's defaults (a job reads `queued` from its
// creation on), a Schedule's cancelRequested, the Invalid condition (Python: resources/job.py, written_status).
const NOT_THE_LIFECYCLES = new Set([...Object.keys(JOB_STATUS_DEFAULTS), 'cancelRequested', 'conditions']);

/** A job's status as the operator's lifecycle wrote it: without the CRD's defaults while it has never written it. */
export function writtenStatus(status: Obj | undefined): Obj {
  const st = status ?? {};
  const defaults: Obj = JOB_STATUS_DEFAULTS;
  const unwritten = Object.entries(defaults).every(([k, v]) => !(k in st) || st[k] === v) &&
    Object.keys(st).every((k) => NOT_THE_LIFECYCLES.has(k));
  return unwritten ? Object.fromEntries(Object.entries(st).filter(([k]) => !(k in defaults))) : st;
}

function undecided(status: Obj | undefined, started: boolean): boolean {
  const st = writtenStatus(status); // the CRD's default state is no decision
  return (!st.state && !started) || Boolean(st.duplicateOf);
}

export function record(raw: Obj, created?: boolean): JobRecord {
  const spec = raw.spec ?? {};
  const status = raw.status ?? {};
  const out: JobRecord = {
    id: jobId(raw.metadata.name), name: raw.metadata.name, namespace: raw.metadata.namespace, queue: spec.queue,
    handler: spec.handler, payload: spec.payload ?? {}, priority: spec.priority ?? 0, state: status.state ?? '',
    attempt: status.attempt ?? 0, createdAt: raw.metadata.creationTimestamp, object: raw,
  };
  if (spec.idempotencyKey) out.idempotencyKey = spec.idempotencyKey;
  if (spec.runAt) out.runAt = spec.runAt;
  if (spec.concurrencyKey) out.concurrencyKey = spec.concurrencyKey;
  if (status.output !== undefined) out.output = status.output;
  if (status.outputNote) out.outputNote = status.outputNote;
  if (status.progress) out.progress = status.progress;
  if (created !== undefined) out.created = created;
  return out;
}

export class JobsApi {
  private readonly windowMs = idempotencyWindowMs();

  constructor(private readonly kube: () => Kube, readonly namespace: string) {}

  /** Create a job. With an idempotency key used within 24 h, that job (created: false) — or KeyConflict when it
   * has another queue, handler or payload. InputError (naming the option) before anything is sent. */
  async create<P = Record<string, unknown>>(options: CreateJob<P>): Promise<JobRecord> {
    return this.send(this.prepare(options));
  }

  /** Create many jobs in one call: each item has create()'s options. Every item is checked first (InputError
   * naming jobs[i].FIELD, and nothing is created); then one CreateResult per item, in order, CONCURRENCY at a
   * time. An item with an idempotency key that an earlier item uses is created after it, so that it returns that
   * job (or is refused, KeyConflict, when it differs). */
  async createMany<P = Record<string, unknown>>(items: CreateJob<P>[]): Promise<CreateResult[]> {
    if (!Array.isArray(items)) throw new InputError('jobs', 'give an array of { queue, handler, payload }');
    const wanted = items.map((item, i) => {
      try {
        return this.prepare(item);
      } catch (err) {
        if (err instanceof InputError) throw new InputError(`jobs[${i}].${err.field === 'create' ? 'body' : err.field}`, err.rule);
        throw err;
      }
    });
    const results: CreateResult[] = new Array(wanted.length);
    const one = async (i: number): Promise<void> => {
      for (let attempt = 1; ; attempt++) {
        try {
          const job = await this.send(wanted[i]);
          results[i] = { id: job.id, created: Boolean(job.created), status: job.created ? 201 : 200, job };
          return;
        } catch (caught) {
          const err = caught instanceof ApiError ? refused(caught, wanted[i].namespace) : caught;
          if (!(err instanceof Refused)) throw err;
          results[i] = { created: false, error: err, status: err.status || 500 };
          if (!(err.status === 429 && attempt < TOO_MANY_TRIES)) return;
          await new Promise((resolve) => setTimeout(resolve, 1000));
        }
      }
    };
    for (const indices of firstUses(wanted.map((w) => w.key))) {
      let next = 0;
      await Promise.all(Array.from({ length: Math.min(CONCURRENCY, indices.length) }, async () => {
        while (next < indices.length) await one(indices[next++]);
      }));
    }
    return results;
  }

  /** create()'s options checked and made a spec: InputError naming the option, before anything is sent. */
  private prepare<P>(options: CreateJob<P>): Prepared {
    if (options === null || typeof options !== 'object') throw new InputError('create', 'give { queue, handler, payload }');
    const namespace = namespaceName('namespace', options.namespace ?? this.namespace);
    const spec: Obj = {
      queue: objectName('queue', options.queue, 'queue name'),
      handler: objectName('handler', options.handler, 'handler name'),
      payload: checkPayload('payload', options.payload ?? {}),
      priority: checkPriority('priority', options.priority ?? 0),
    };
    if (options.runAt !== undefined) {
      const when = options.runAt instanceof Date ? options.runAt : new Date(String(options.runAt));
      if (Number.isNaN(when.getTime()) || (typeof options.runAt === 'string' && !/(Z|[+-]\d\d:?\d\d)$/i.test(options.runAt))) {
        throw new InputError('runAt', `${JSON.stringify(options.runAt)} is not a time: use a Date or RFC 3339 with a time zone, e.g. 2026-12-01T10:00:00Z`);
      }
      spec.runAt = formatTime(when, false);
    }
    if (options.concurrencyKey !== undefined) spec.concurrencyKey = concurrencyKey('concurrencyKey', options.concurrencyKey);
    const key = options.idempotencyKey === undefined ? undefined : idempotencyKey('idempotencyKey', options.idempotencyKey);
    return { namespace, spec, key };
  }

  private async send({ namespace, spec, key }: Prepared): Promise<JobRecord> {
    const kube = this.kube();
    const jobs = path('jobs', namespace);
    if (key !== undefined) {
      spec.idempotencyKey = key;
      const held = await this.keyHolder(kube, namespace, key, Date.now());
      if (held) return record(replayed(held, key, spec), false);
    }
    for (let generation = 0; generation < 1000; generation++) {
      const name = key !== undefined ? keyedName(namespace, key, generation) : randomName();
      const body = { apiVersion: API_VERSION, kind: 'Job', metadata: { name }, spec };
      try {
        return record(await kube.request('POST', jobs, { body }), true);
      } catch (err) {
        if (!(err instanceof ApiError && err.status === 409)) throw refused(err, namespace);
      }
      if (key === undefined) continue; // a random name collided: draw another
      const existing = await kube.request('GET', path('jobs', namespace, name));
      const created = Date.parse(existing.metadata.creationTimestamp);
      if (existing.spec?.idempotencyKey === key && Date.now() - created < this.windowMs) {
        return record(replayed(existing, key, spec), false);
      }
    }
    throw new Refused(`no free name for idempotency key '${key}'`, 409);
  }

  /** The job that holds an idempotency key now, by any name (one list selected by spec.idempotencyKey). */
  private async keyHolder(kube: Kube, namespace: string, key: string, now: number): Promise<Obj | undefined> {
    const jobs = path('jobs', namespace);
    let found: Obj[];
    try {
      try {
        found = (await kube.list(jobs, { fieldSelector: `spec.idempotencyKey=${selectorValue(key)}` })).items;
      } catch (err) {
        if (!(err instanceof ApiError && err.status === 400 && err.message.includes('field label not supported'))) throw err;
        found = (await kube.list(jobs)).items.filter((j) => j.spec?.idempotencyKey === key);
      }
    } catch (err) {
      if (err instanceof ApiError && err.status === 403) return undefined; // the keyed name decides alone
      throw refused(err, namespace);
    }
    const carriers = found.filter((j) => !j.metadata?.deletionTimestamp && j.spec?.idempotencyKey === key
      && !Number.isNaN(Date.parse(j.metadata?.creationTimestamp)));
    const times = carriers.map((j) => Date.parse(j.metadata.creationTimestamp));
    const tied = new Set(times).size < times.length;
    const candidates: Candidate[] = [];
    for (const [i, j] of carriers.entries()) {
      const started = tied && (await this.hasAttemptPod(kube, namespace, j.metadata.name));
      candidates.push([times[i], undecided(j.status, started), j.metadata.name]);
    }
    const name = holder(candidates, now, this.windowMs);
    return carriers.find((j) => j.metadata.name === name);
  }

  private async hasAttemptPod(kube: Kube, namespace: string, job: string): Promise<boolean> {
    try {
      const { items } = await kube.list(path('pods', namespace, undefined, false), { labelSelector: `sextant.dev/job=${job}` });
      return items.length > 0;
    } catch (err) {
      if (err instanceof ApiError && err.status === 403) return false;
      throw err;
    }
  }

  async get(id: string, namespace = this.namespace): Promise<JobRecord> {
    const name = jobName('id', id);
    try {
      return record(await this.kube().request('GET', path('jobs', namespaceName('namespace', namespace), name)));
    } catch (err) {
      throw refused(err, namespace, name);
    }
  }

  /** What the job's handler returned (status.output), undefined while it has not succeeded (or returned nothing). */
  async output(id: string, namespace = this.namespace): Promise<unknown> {
    return (await this.get(id, namespace)).output;
  }

  /** The namespace's jobs, oldest first, optionally of one state, queue or handler. */
  async list(options: ListJobs = {}): Promise<JobRecord[]> {
    if (options.state !== undefined && !STATES.includes(options.state)) {
      throw new InputError('state', `'${options.state}' is not a state; use one of ${STATES.join(', ')}`);
    }
    if (options.queue !== undefined) objectName('queue', options.queue, 'queue name');
    if (options.handler !== undefined) objectName('handler', options.handler, 'handler name');
    const namespace = namespaceName('namespace', options.namespace ?? this.namespace);
    let items: Obj[];
    try {
      items = (await this.kube().list(path('jobs', namespace))).items;
    } catch (err) {
      throw refused(err, namespace);
    }
    return items.map((raw) => record(raw))
      .filter((j) => (options.state === undefined || j.state === options.state)
        && (options.queue === undefined || j.queue === options.queue)
        && (options.handler === undefined || j.handler === options.handler))
      .sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.name.localeCompare(b.name));
  }

  /** Ask for a cancel (scheduled, queued or running jobs); Refused with the reason for a finished one. */
  async cancel(id: string, namespace = this.namespace): Promise<JobRecord> {
    return this.patch(id, namespace, { spec: { cancel: true } });
  }

  /** Ask for a retry of a failed or dead job (its attempts start again from 1); Refused for another state. */
  async retry(id: string, namespace = this.namespace): Promise<JobRecord> {
    const stamp = formatTime(new Date(), false).replace(/[-:]/g, '').replace(/Z$/, '');
    const token = `r-${stamp}-${Math.random().toString(16).slice(2, 8)}`;
    return this.patch(id, namespace, { spec: { retryToken: token } });
  }

  /** Cancel every job the filter matches that can be cancelled (scheduled, queued, running or failed; not one
   * already asked), oldest first, each as a single cancel is; at least one of state, queue or handler. */
  async cancelMatching(filter: ListJobs): Promise<BulkOutcome> {
    return this.bulk('cancel', filter);
  }

  /** Retry every failed or dead job the filter matches, oldest first, each as a single retry is. */
  async retryMatching(filter: ListJobs): Promise<BulkOutcome> {
    return this.bulk('retry', filter);
  }

  private async bulk(verb: 'cancel' | 'retry', filter: ListJobs): Promise<BulkOutcome> {
    if (filter.state === undefined && filter.queue === undefined && filter.handler === undefined) {
      // An empty filter would act on the whole namespace by accident.
      throw new InputError('queue', `name what to ${verb}: at least one of queue, state or handler`);
    }
    const allowed = verb === 'cancel' ? CANCELLABLE : RETRYABLE;
    const past = verb === 'cancel' ? 'cancelled' : 'retried';
    if (filter.state !== undefined && STATES.includes(filter.state) && !allowed.includes(filter.state)) {
      throw new InputError('state', `${filter.state} jobs cannot be ${past}: only ${listed(allowed)} jobs can be ${past}`);
    }
    const targets = (await this.list(filter))
      .filter((j) => allowed.includes(j.state) && !(verb === 'cancel' && j.object.spec?.cancel));
    const outcome: BulkOutcome = { requested: [], refused: [] };
    for (const j of targets) {
      try {
        await (verb === 'cancel' ? this.cancel(j.id, j.namespace) : this.retry(j.id, j.namespace));
        outcome.requested.push(j.id);
      } catch (err) {
        if (!(err instanceof Refused)) throw err;
        outcome.refused.push({ id: j.id, reason: err.message });  // its state changed meanwhile: the others go on
      }
    }
    return outcome;
  }

  private async patch(id: string, namespace: string, body: Obj): Promise<JobRecord> {
    const name = jobName('id', id);
    try {
      return record(await this.kube().request('PATCH', path('jobs', namespaceName('namespace', namespace), name),
        { body, contentType: 'application/merge-patch+json' }));
    } catch (err) {
      if (err instanceof ApiError && err.status === 422) {
        const match = REFUSAL.exec(String((err.body as Obj)?.message ?? ''));
        if (match) throw new Refused(`job ${jobId(name)}: ${match[1]}`, 422);
      }
      throw refused(err, namespace, name);
    }
  }
}

/** The items of a batch in two rounds: those without a key or with its first use in the batch, then the later
 * uses of a key (client.first_uses). */
export function firstUses(keys: (string | undefined)[]): number[][] {
  const seen = new Set<string>();
  const first: number[] = [], later: number[] = [];
  keys.forEach((key, i) => {
    if (key !== undefined && seen.has(key)) later.push(i);
    else {
      first.push(i);
      if (key !== undefined) seen.add(key);
    }
  });
  return [first, later];
}

function replayed(held: Obj, key: string, spec: Obj): Obj {
  const fields = differences(held.spec ?? {}, spec);
  if (fields.length) throw new KeyConflict(key, jobId(held.metadata.name), fields, held.spec ?? {}, spec);
  return held;
}

/** Pause and resume queues (spec.paused) from a Node app, as `sextant queues pause|resume` does. */
export class QueuesApi {
  constructor(private readonly kube: () => Kube, private readonly namespace: string) {}

  /** Pause a queue: running attempts finish, nothing new starts, jobs keep arriving queued. The Queue object. */
  async pause(queue: string, namespace = this.namespace): Promise<Obj> {
    return this.set(queue, namespace, true);
  }

  /** Resume a paused queue: its queued jobs start again, in order. The Queue object. */
  async resume(queue: string, namespace = this.namespace): Promise<Obj> {
    return this.set(queue, namespace, false);
  }

  private async set(queue: string, namespace: string, paused: boolean): Promise<Obj> {
    const name = objectName('queue', queue, 'queue name');
    const ns = namespaceName('namespace', namespace);
    try {
      return await this.kube().request('PATCH', path('queues', ns, name),
        { body: { spec: { paused } }, contentType: 'application/merge-patch+json' });
    } catch (err) {
      throw refused(err, ns, name, 'queue');
    }
  }
}

/** An API error as a Refused that names the job (or queue) and namespace, or says what the API server said. */
function refused(err: unknown, namespace: string, name?: string, kind: 'job' | 'queue' = 'job'): unknown {
  if (!(err instanceof ApiError)) return err;
  const message = String((err.body as Obj)?.message ?? err.message);
  if (err.status === 404 && message.includes('the server could not find the requested resource')) {
    return new Refused('the Sextant CRDs are not installed in this cluster (the API server does not know sextant.dev resources): kubectl apply -f crds/', 404);
  }
  if (err.status === 404 && name) {
    return new Refused(`${kind} ${kind === 'job' ? jobId(name) : name} not found in namespace ${namespace}`, 404);
  }
  if (err.status === 0) return new Refused(`cannot reach the API server: ${err.message}`, 0);
  return new Refused(`Error from server (${err.reason || err.status}): ${message}`, err.status);
}

export interface SextantOptions extends ConnectOptions {
  /** The namespace of its jobs; default the kubeconfig context's, else "default". */
  namespace?: string;
}

/** Enqueue and look after jobs from a Node app: new Sextant({ namespace: 'shop' }).jobs.create({...}). */
export class Sextant {
  readonly namespace: string;
  readonly jobs: JobsApi;
  readonly queues: QueuesApi;
  private kube: Kube | undefined;

  constructor(private readonly options: SextantOptions = {}) {
    if (options.namespace !== undefined) namespaceName('namespace', options.namespace);
    this.namespace = options.namespace ?? this.connection().namespace ?? 'default';
    this.jobs = new JobsApi(() => this.connection(), this.namespace);
    this.queues = new QueuesApi(() => this.connection(), this.namespace);
  }

  /** The connection, made once (at first use when the namespace is given: a client made at import time then costs
   * nothing until it is used). */
  private connection(): Kube {
    this.kube ??= Kube.load(this.options);
    return this.kube;
  }
}
