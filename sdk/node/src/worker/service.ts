// The worker (docs/workers.md; the Python worker's service.py): its Worker object (registration.ts), the watch of that
// one object (its assignments, in status), one Execution per assignment, results batched into its spec, stops, the
// fence and the drain. An assignment runs once, only for the incarnation it names when that is this process's current
// one; the job is read (GET) for its payload, again while the API server fails to answer, and a job that is gone or
// has another uid is reported NotFound.
import { ApiError, Informer, Kube, Obj, path, sleep } from '../kube.js';
import { PAYLOAD_ENV_MAX_BYTES, checkFraction, clipProgressMessage, formatTime, jobId, parseDuration, payloadJson, scheduledAtOf } from '../common.js';
import { PROTOCOL } from '../generated/protocol.js';
import { QUEUE_SPEC_DEFAULTS, type Assignment, type HandlerSpec, type QueueSpec as QueueObjectSpec, type WorkerProgress,
  type WorkerResult } from '../generated/wire.js';
import { JobsApi } from '../client.js';
import { Snooze, type Context, type HandlerFunction, type Job } from '../handlers.js';
import type { Logger } from './log.js';
import { AllowCommands, Served, plan, servedHandlers, serving } from './plan.js';
import { WorkerMetrics } from './metrics.js';
import { Offer, Registration, monotonic, podOwner } from './registration.js';
import { CommandWork, Ended, Execution, FunctionWork, Reaper, Work, commandEnvironment } from './work.js';

const LOST = 'Lost'; // no longer this worker's: stopped, reported nothing
const DRAINED = 'Drained';
const NOT_FOUND = 'NotFound';
const DRAIN_LEAVE_WAIT_MS = PROTOCOL.drainLeaveWaitSeconds * 1000;
const REMEMBERED = PROTOCOL.rememberedAssignments;
const READ_RETRY_FIRST_MS = 200, READ_RETRY_MAX_MS = 2000; // between reads of a job the API server did not give
const MESSAGE_MAX_LENGTH = PROTOCOL.messageMaxLength;

export interface Settings {
  namespace: string;
  name: string;
  concurrency: number;
  drainGraceSeconds: number;
  wantQueues?: Set<string>;
  wantHandlers?: Set<string>;
  allowCommands: AllowCommands;
  commandEnv: Record<string, string>;
}

/** What a worker reads of a Queue: its lease and cancel grace, the CRD's defaults filled in. */
type QueueSpec = Required<Pick<QueueObjectSpec, 'leaseDuration' | 'cancelGrace'>>;
const QUEUE_DEFAULTS: QueueSpec = { leaseDuration: QUEUE_SPEC_DEFAULTS.leaseDuration, cancelGrace: QUEUE_SPEC_DEFAULTS.cancelGrace };

interface Running {
  assignment: Assignment;
  seenAt: number; // monotonic ms: its timeout counts from here
  execution?: Execution;
  stop?: [string, number | undefined]; // a stop asked before the execution exists
  timer?: NodeJS.Timeout;
}

const keyOf = (a: Assignment) => `${a.uid}/${a.sequence}/${a.incarnation}`;

function readAssignment(item: any): Assignment | undefined {
  const ok = item && typeof item === 'object' && typeof item.job === 'string' && typeof item.uid === 'string'
    && Number.isInteger(item.sequence) && item.sequence >= 1 && Number.isInteger(item.attempt) && item.attempt >= 1
    && typeof item.incarnation === 'string' && typeof item.handler === 'string' && typeof item.queue === 'string';
  return ok ? item as Assignment : undefined;
}

/** Seconds from assignment to timeout, both by the operator's clock (applied from when this worker saw it). */
function timeoutAfter(a: Assignment): number | undefined {
  const due = Date.parse(a.timeoutAt ?? ''), assigned = Date.parse(a.assignedAt ?? '');
  return Number.isNaN(due) || Number.isNaN(assigned) ? undefined : Math.max(0, (due - assigned) / 1000);
}

function queueSpec(obj: Obj): QueueSpec {
  const spec = obj.spec ?? {};
  return { leaseDuration: spec.leaseDuration ?? QUEUE_DEFAULTS.leaseDuration, cancelGrace: spec.cancelGrace ?? QUEUE_DEFAULTS.cancelGrace };
}

function handlerSpec(obj: Obj): HandlerSpec {
  const spec = obj.spec ?? {};
  const command = spec.worker?.command;
  return { template: spec.template, worker: spec.worker ? { command: Array.isArray(command) ? command.map(String) : undefined } : undefined };
}

function seconds(text: string, fallback: string): number {
  try {
    return parseDuration(text);
  } catch {
    return parseDuration(fallback);
  }
}

export class WorkerService {
  readonly name: string;
  readonly namespace: string;
  private queues = new Map<string, QueueSpec>();
  private handlers = new Map<string, HandlerSpec>();
  private served!: Served;
  private registration!: Registration;
  private informers: Informer[] = [];
  private readonly assigned = new Map<string, Assignment>();
  private readonly running = new Map<string, Running>();
  private readonly handled = new Set<string>(); // insertion-ordered: the oldest are forgotten first
  private readonly results = new Map<string, WorkerResult>();
  // The latest progress of each running attempt that reported some: sent with the next write.
  private readonly progress = new Map<string, WorkerProgress>();
  private readonly tasks = new Set<Promise<void>>();
  private lingering = 0;
  private draining = false;
  private hurry: (() => void) | undefined;
  private drainAsked = false;
  private serving = false; // registered: a drain can start
  private drainedResolve!: () => void;
  private readonly drained = new Promise<void>((r) => { this.drainedResolve = r; });
  private statusWaiters: (() => void)[] = [];
  private reaper: Reaper | undefined;
  private jobsApi: JobsApi | undefined;
  readonly metrics: WorkerMetrics;

  constructor(private readonly kube: Kube, readonly settings: Settings,
              private readonly functions: Map<string, HandlerFunction>, private readonly log: Logger) {
    this.name = settings.name;
    this.namespace = settings.namespace;
    this.metrics = new WorkerMetrics(this.name, () => this.slots());
  }

  /** Read the namespace's Queues and Handlers and check what to serve: PlanError naming what is wrong. */
  async start(): Promise<void> {
    const [queues, handlers] = await Promise.all([
      this.kube.list(path('queues', this.namespace)), this.kube.list(path('handlers', this.namespace))]);
    for (const q of queues.items) this.queues.set(q.metadata.name, queueSpec(q));
    for (const h of handlers.items) this.handlers.set(h.metadata.name, handlerSpec(h));
    const s = this.settings;
    this.served = plan(this.namespace, new Set(this.queues.keys()), this.handlers, new Set(this.functions.keys()),
      s.wantQueues, s.wantHandlers, s.allowCommands);
    const owner = podOwner();
    const user = owner ? undefined : await this.user();
    this.registration = new Registration(this.kube, this.namespace, this.name, () => this.offer(),
      () => [...this.results.values()], (why) => this.lost(why), this.log, owner, user, () => [...this.progress.values()]);
  }

  get holder(): string {
    return this.registration.holder;
  }

  get takenOverReason(): string | undefined {
    return this.registration?.takenOverReason;
  }

  private async user(): Promise<string | undefined> {
    try {
      const review = await this.kube.request('POST', '/apis/authentication.k8s.io/v1/selfsubjectreviews',
        { body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' }, timeoutMs: 5000 });
      const name = review.status?.userInfo?.username;
      return name ? String(name).slice(0, 256) : undefined;
    } catch {
      return undefined;
    }
  }

  // --- what it offers ---------------------------------------------------------------------------------------
  offer(): Offer {
    const leases = [...this.queues].filter(([name]) => this.served.queues.has(name))
      .map(([, q]) => seconds(q.leaseDuration, QUEUE_DEFAULTS.leaseDuration));
    const lease = leases.length ? Math.min(...leases) : parseDuration(QUEUE_DEFAULTS.leaseDuration);
    return { queues: [...this.served.queues], handlers: [...servedHandlers(this.served)],
             slots: Math.max(0, this.settings.concurrency - this.lingering), leaseSeconds: Math.max(1, Math.floor(lease)),
             draining: this.draining };
  }

  private reconsider(): void {
    const s = this.settings;
    const served = serving(this.queues.keys(), this.handlers, new Set(this.functions.keys()), s.wantQueues,
      s.wantHandlers, s.allowCommands);
    const fresh = [...served.refused].filter((n) => !this.served.refused.has(n));
    if (fresh.length) this.sayRefused(fresh);
    const before = JSON.stringify(this.offer());
    this.served = served;
    if (JSON.stringify(this.offer()) !== before) {
      this.log.info(`worker ${this.name} now serves queues ${[...served.queues].sort().join(',') || '-'}, handlers ${[...servedHandlers(served)].sort().join(',') || '-'}`);
      this.registration.changed();
    }
  }

  private sayRefused(names: string[]): void {
    this.log.warn(`worker ${this.name} does not serve the command handlers ${names.sort().join(', ')}: it runs a Handler's command only when told to (--allow-commands, or --allow-command NAME); their jobs wait (Blocked, NoWorker) for a worker that does`);
  }

  // --- its assignments --------------------------------------------------------------------------------------
  private onWorker(kind: 'upsert' | 'delete', obj: Obj): void {
    if (kind === 'delete') {
      this.registration.changed(); // its next write meets the 404, and registers again
      return;
    }
    this.registration.seen(obj.spec?.incarnation);
    if (this.registration.takenOver) return;
    const items = Array.isArray(obj.status?.assignments) ? obj.status.assignments : [];
    const current = new Map<string, Assignment>();
    for (const item of items) {
      const a = readAssignment(item);
      if (a) current.set(keyOf(a), a);
      else this.log.warn(`an assignment cannot be read: ${JSON.stringify(item).slice(0, 200)}`);
    }
    this.assigned.clear();
    for (const [k, a] of current) this.assigned.set(k, a);
    for (const k of [...this.results.keys()]) if (!current.has(k)) this.results.delete(k); // recorded
    for (const [k, running] of this.running) {
      if (!current.has(k)) this.stop(running, LOST, this.fenceGrace(running)); // recorded without its word
    }
    for (const [k, a] of current) {
      const running = this.running.get(k);
      if (running) {
        running.assignment = a;
        if (a.stop) this.stop(running, a.stop, a.cancelGraceSeconds);
      } else if (!this.handled.has(k) && a.incarnation === this.registration.incarnation) {
        this.handled.add(k);
        this.begin(k, a);
      }
    }
    while (this.handled.size > REMEMBERED) this.handled.delete(this.handled.values().next().value as string);
    for (const w of this.statusWaiters.splice(0)) w();
  }

  private begin(key: string, a: Assignment): void {
    if (this.draining) { // assigned before the operator saw the drain: reported without running
      this.report(key, this.result(a, { exitCode: null, message: 'the worker was draining' }, DRAINED, undefined));
      return;
    }
    const running: Running = { assignment: a, seenAt: monotonic() };
    this.running.set(key, running);
    const task = this.attempt(key, running).catch((err) => this.log.error(`an attempt failed unexpectedly: ${(err as Error).stack}`));
    this.tasks.add(task);
    task.finally(() => this.tasks.delete(task));
  }

  private stop(running: Running, reason: string, grace?: number): void {
    if (running.execution) {
      if (running.execution.stopReason === undefined) this.log.info(`job ${running.assignment.job}: stopping attempt #${running.assignment.sequence} (${reason})`);
      running.execution.stop(reason, grace);
    } else if (!running.stop) running.stop = [reason, grace];
  }

  /** SIGTERM to SIGKILL for an attempt that is no longer this worker's: cancelGrace, at most leaseDuration/6. */
  private fenceGrace(running: Running): number {
    return Math.min(running.execution?.cancelGraceSeconds ?? 0, this.offer().leaseSeconds / 6);
  }

  private cancelGrace(a: Assignment): number {
    if (typeof a.cancelGraceSeconds === 'number') return Math.max(0, a.cancelGraceSeconds);
    return seconds((this.queues.get(a.queue) ?? QUEUE_DEFAULTS).cancelGrace, QUEUE_DEFAULTS.cancelGrace);
  }

  /**
   * The job, for its payload; undefined when it is gone or is another job of the same name (another uid). A read
   * that fails otherwise (an outage, a 429) says nothing about the job: it is tried again until it answers or the
   * attempt is stopped (the worker fenced, a cancel, its timeout), and then it is an Ended that ran nothing.
   * Reporting it NotFound would burn a counted attempt on the API server's trouble.
   */
  private async readJob(running: Running): Promise<Obj | Ended | undefined> {
    const a = running.assignment;
    let pause = READ_RETRY_FIRST_MS;
    for (;;) {
      try {
        const raw = await this.kube.request('GET', path('jobs', this.namespace, a.job));
        return raw.metadata?.uid === a.uid ? raw : undefined;
      } catch (err) {
        if (err instanceof ApiError && err.status === 404) return undefined;
        const message = (err as Error).message;
        if (running.stop) return { exitCode: null, message: `stopped before the job could be read: ${message}` };
        this.log.warn(`job ${a.job}: cannot read it (trying again in ${pause} ms): ${message}`);
        await sleep(pause);
        pause = Math.min(READ_RETRY_MAX_MS, pause * 2);
      }
    }
  }

  /** How to run the job's handler here; an Ended when it cannot run here at all. */
  private work(raw: Obj, a: Assignment): Work | Ended {
    const label = `[${a.job}#${a.sequence}]`;
    const payload = raw.spec?.payload ?? {};
    const scheduledAt = scheduledAtOf(raw);
    const command = this.served.commands.get(a.handler);
    if (command) {
      const queue = this.queues.get(a.queue) ?? QUEUE_DEFAULTS;
      const text = payloadJson(payload);
      const variables: Record<string, string> = {
        SEXTANT_JOB_ID: jobId(a.job), SEXTANT_JOB_NAME: a.job, SEXTANT_JOB_UID: a.uid, SEXTANT_NAMESPACE: this.namespace,
        SEXTANT_QUEUE: a.queue, SEXTANT_HANDLER: a.handler, SEXTANT_ATTEMPT: String(a.attempt),
        SEXTANT_SEQUENCE: String(a.sequence), SEXTANT_RUN: String(a.sequence), SEXTANT_SCHEDULED_AT: scheduledAt,
        ...(Buffer.byteLength(text) <= PAYLOAD_ENV_MAX_BYTES ? { SEXTANT_PAYLOAD: text } : {}),
        SEXTANT_LEASE_NAME: this.name, SEXTANT_LEASE_DURATION: queue.leaseDuration, SEXTANT_CANCEL_GRACE: queue.cancelGrace,
        SEXTANT_HEARTBEAT: 'false', // the worker's own renewals cover it
        SEXTANT_NODE_NAME: this.name, SEXTANT_POD_NAME: process.env.POD_NAME || this.name, SEXTANT_WORKER: this.holder,
      };
      this.reaper ??= new Reaper();
      return new CommandWork(command, commandEnvironment(process.env, this.settings.commandEnv, variables), payload, label,
        this.reaper, this.progressOf(a));
    }
    const fn = this.served.functions.has(a.handler) ? this.functions.get(a.handler) : undefined;
    if (!fn && this.served.refused.has(a.handler)) {
      return { exitCode: 1, message: `worker ${this.name} does not run Handler '${a.handler}': it is a command, and this worker runs a Handler's command only when told to (--allow-commands or --allow-command ${a.handler}); retried on a worker that does` };
    }
    if (!fn) {
      return { exitCode: 1, message: `worker ${this.name} does not serve handler '${a.handler}' (any more): its Handler is not a worker-mode one this worker can run` };
    }
    const job: Job = Object.freeze({ id: jobId(a.job), name: a.job, namespace: this.namespace, queue: a.queue,
      handler: a.handler, attempt: a.attempt, payload, scheduledAt });
    const abort = new AbortController();
    const report = this.progressOf(a);
    const jobs = this.jobsApi ??= new JobsApi(() => this.kube, this.namespace);
    const ctx: Context = Object.freeze({
      signal: abort.signal,
      get cancelled() { return abort.signal.aborted; },
      snooze(delay: string | number): never { throw new Snooze(delay); },
      progress: (fraction: number, message?: string) => report(checkFraction(fraction), clipProgressMessage(message)),
      jobs: {
        create: (options: Parameters<typeof jobs.create>[0]) => jobs.create(options),
        createMany: (items: Parameters<typeof jobs.createMany>[0]) => jobs.createMany(items),
        get: (id: string, namespace?: string) => jobs.get(id, namespace),
        output: (id: string, namespace?: string) => jobs.output(id, namespace),
      },
    });
    return new FunctionWork(fn, job, ctx, abort, label);
  }

  /** Keeps an attempt's latest progress for the next write (results.progress_of). */
  private progressOf(a: Assignment): (fraction: number, message?: string) => void {
    const key = keyOf(a);
    return (fraction, message) => {
      if (!this.running.has(key)) return;
      const entry: WorkerProgress = { job: a.job, uid: a.uid, sequence: a.sequence, incarnation: a.incarnation, fraction };
      if (message) entry.message = message;
      this.progress.set(key, entry);
    };
  }

  private async attempt(key: string, running: Running): Promise<void> {
    const a = running.assignment;
    try {
      const raw = await this.readJob(running);
      if (running.stop?.[0] === LOST) return this.refused(key, 'no longer this worker\'s');
      if (!raw) {
        const gone = { exitCode: null, message: 'the job is gone, or is another job of the same name' };
        return this.report(key, this.result(a, gone, NOT_FOUND, undefined));
      }
      const work = isEnded(raw) ? raw : this.work(raw, a);
      const execution = new Execution('run' in work ? work : done(work), this.cancelGrace(a));
      running.execution = execution;
      if (running.stop) execution.stop(running.stop[0], running.stop[1]);
      else if (a.stop) execution.stop(a.stop, a.cancelGraceSeconds);
      const after = timeoutAfter(running.assignment);
      if (after !== undefined) {
        const delay = Math.max(0, after * 1000 - (monotonic() - running.seenAt));
        running.timer = setTimeout(() => this.stop(running, 'Timeout'), delay);
      }
      const startedAt = new Date();
      let ended: Ended;
      try {
        ended = await execution.run();
      } catch (err) { // a fault of the worker's own: still a result, never a hang
        ended = { exitCode: 1, message: `the worker could not run it: ${(err as Error).message}` };
      }
      if (execution.lingering) this.linger(execution.lingering);
      const reason = execution.stopReason;
      if (reason === LOST) return this.refused(key, 'stopped: no longer this worker\'s');
      this.metrics.attempt(a.queue, a.handler, reason === 'Cancelled' ? 'cancelled'
        : ended.exitCode === 0 && reason === undefined ? 'succeeded' : 'failed');
      this.report(key, this.result(a, ended, reason, execution.started ? startedAt : undefined));
    } finally {
      if (running.timer) clearTimeout(running.timer);
      this.progress.delete(key);
      if (this.running.get(key) === running) this.running.delete(key);
      this.hurryIfIdle();
    }
  }

  private result(a: Assignment, ended: Ended, stop: string | undefined, startedAt: Date | undefined): WorkerResult {
    const result: WorkerResult = { job: a.job, uid: a.uid, sequence: a.sequence, incarnation: a.incarnation };
    if (ended.exitCode !== null) result.exitCode = Math.max(0, Math.min(255, ended.exitCode));
    if (stop !== undefined) result.reason = stop;
    if (ended.message && ended.exitCode !== 0) result.message = ended.message.slice(-MESSAGE_MAX_LENGTH);
    if (ended.snoozeSeconds !== undefined) result.snoozeSeconds = ended.snoozeSeconds;
    if (ended.output !== undefined) result.output = JSON.parse(ended.output); // within the cap: returned() checked it
    if (ended.outputNote) result.outputNote = ended.outputNote.slice(0, MESSAGE_MAX_LENGTH);
    if (startedAt) result.startedAt = formatTime(startedAt);
    result.finishedAt = formatTime(new Date());
    return result;
  }

  /** A result to write: in the next spec write (at once when none is in flight). */
  private report(key: string, result: WorkerResult): void {
    if (!this.assigned.has(key)) return this.refused(key, 'its assignment has left status meanwhile');
    this.results.set(key, result);
    this.registration.changed();
  }

  private refused(key: string, why: string): void {
    this.log.info(`attempt ${key} not reported (${why})`);
    this.metrics.refused();
  }

  /** A handler given up on runs on: its slot is not offered until it settles. */
  private linger(task: Promise<unknown>): void {
    this.lingering += 1;
    this.registration.changed();
    task.finally(() => {
      this.lingering -= 1;
      this.registration.changed();
    }).catch(() => {});
  }

  // --- losing its attempts, draining ------------------------------------------------------------------------
  private lost(_why: string): void {
    for (const running of this.running.values()) this.stop(running, LOST, this.fenceGrace(running));
  }

  private hurryIfIdle(): void {
    if (this.draining && this.running.size === 0) this.hurry?.();
  }

  /** SIGTERM: take nothing new, let running handlers finish within the drain grace, then stop the rest. A second
   * call skips what is left of the grace. */
  drain(): void {
    if (this.drainAsked) {
      this.hurry?.();
      return;
    }
    this.drainAsked = true;
    if (this.serving) void this.drainNow();
  }

  private async drainNow(): Promise<void> {
    this.log.info(`worker ${this.name}: draining (${this.running.size} running; grace ${this.settings.drainGraceSeconds}s)`);
    this.draining = true;
    this.registration.changed();
    if (this.running.size) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, this.settings.drainGraceSeconds * 1000);
        this.hurry = () => { clearTimeout(timer); resolve(); };
      });
    }
    this.hurry = undefined;
    for (const running of this.running.values()) this.stop(running, DRAINED);
    await this.settle();
    // Until its results are recorded (their assignments leave status), briefly: then its object goes.
    const leaveBy = monotonic() + DRAIN_LEAVE_WAIT_MS;
    while (this.mineAssigned() && monotonic() < leaveBy) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.max(0, leaveBy - monotonic()));
        this.statusWaiters.push(() => { clearTimeout(timer); resolve(); });
      });
    }
    this.drainedResolve();
  }

  private mineAssigned(): boolean {
    return [...this.assigned.values()].some((a) => this.registration.incarnations.has(a.incarnation));
  }

  private async settle(): Promise<void> {
    while (this.tasks.size) await Promise.allSettled([...this.tasks]);
  }

  /** Register, serve until drained (0) or taken over (1). Throws when it cannot register at start. */
  async run(): Promise<number> {
    if (this.served.commands.size) this.reaper = new Reaper(); // before the first command: a SIGKILL is covered
    await this.registration.register();
    this.log.info(`worker ${this.name} (${this.holder}) serves queues ${[...this.served.queues].sort().join(',') || '-'}, handlers ${[...servedHandlers(this.served)].sort().join(',') || '-'} with ${this.settings.concurrency} slots`);
    if (this.served.refused.size) this.sayRefused([...this.served.refused]);
    const warn = (m: string) => this.log.warn(m);
    this.informers = [
      new Informer(this.kube, path('queues', this.namespace), (kind, obj) => {
        if (kind === 'upsert') this.queues.set(obj.metadata.name, queueSpec(obj));
        else this.queues.delete(obj.metadata.name);
        this.reconsider();
      }, undefined, warn),
      new Informer(this.kube, path('handlers', this.namespace), (kind, obj) => {
        if (kind === 'upsert') this.handlers.set(obj.metadata.name, handlerSpec(obj));
        else this.handlers.delete(obj.metadata.name);
        this.reconsider();
      }, undefined, warn),
      new Informer(this.kube, path('workers', this.namespace), (kind, obj) => this.onWorker(kind, obj),
        `metadata.name=${this.name}`, warn),
    ];
    let takenOver!: () => void;
    const taken = new Promise<'taken'>((resolve) => { takenOver = () => resolve('taken'); });
    this.registration.whenTakenOver(takenOver);
    const watching = this.informers.map((i) => i.run());
    const renewing = this.registration.run();
    this.serving = true;
    if (this.drainAsked) void this.drainNow();
    let code = 0;
    try {
      const first = await Promise.race([this.drained.then(() => 'drained' as const), taken,
        renewing.then(() => 'renewals ended' as const), ...watching.map((w) => w.then(() => 'watch ended' as const))]);
      if (first === 'taken') {
        code = 1;
        this.lost('taken over');
        await this.settle();
      }
    } finally {
      for (const i of this.informers) i.stop();
      this.registration.stop();
      await Promise.allSettled([renewing, ...watching]);
      if (code === 0 && this.draining) await this.registration.delete();
      this.reaper?.close();
    }
    return code;
  }

  /** Slots in use and in all (for people and metrics). */
  slots(): [number, number] {
    return [this.running.size, this.settings.concurrency];
  }
}

/** A readJob that gave up (stopped): what ran instead of the job. */
function isEnded(read: Obj | Ended): read is Ended {
  return 'exitCode' in read && !('metadata' in read);
}

function done(ended: Ended): Work {
  return { run: async () => ended, terminate: () => {}, kill: () => {} };
}
