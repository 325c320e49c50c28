// The worker's own Worker object (docs/workers.md; the Python worker's registration.py): its spec is the worker's
// alone, and every write of it is ONE JSON patch [test /spec/incarnation = mine, replace /spec] with no
// resourceVersion, so the operator's status writes never conflict with it. A 422 on the test is a takeover (another
// process wrote its incarnation): stop, exit 1. A 404: the object was deleted: register again.
//
// Every write is a renewal, at least every leaseDuration/3 and at once when something is ready (one in flight). The
// worker fences itself on a monotonic clock: no write acknowledged within 2/3 of the leaseDuration from when the last
// acknowledged one was sent → its attempts are no longer its own, and it registers again with a new incarnation.
// Each request may take only the time left before that deadline.
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { API_VERSION, ApiError, Kube, Obj, path, sleep } from '../kube.js';
import { NAME_MAX, formatTime } from '../common.js';
import { PROTOCOL } from '../generated/protocol.js';
import type { WorkerProgress, WorkerResult, WorkerSpec } from '../generated/wire.js';
import type { Logger } from './log.js';

const RENEW_DEADLINE = PROTOCOL.renewDeadline;
const JSON_PATCH = 'application/json-patch+json';
const REGISTER_TIMEOUT_MS = 10_000;
const REGISTER_BACKOFF_MAX_MS = 5_000;
export const FINALIZER = PROTOCOL.workerFinalizer;
export const LABEL_WORKER = PROTOCOL.workerLabel;
const DNS_LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

export const monotonic = (): number => performance.now();

export interface Offer {
  queues: string[];
  handlers: string[];
  slots: number;
  leaseSeconds: number;
  draining: boolean;
}

export class TakenOver extends Error {}

/** Any text → a DNS label. */
export function sanitise(text: string): string {
  const label = text.toLowerCase().replace(/[^a-z0-9-]+/g, '-').replace(/^-+|-+$/g, '');
  return label.slice(0, NAME_MAX).replace(/-+$/, '') || 'worker';
}

export function nameProblem(name: string): string | undefined {
  if (DNS_LABEL.test(name)) return undefined;
  return `--name '${name}': a worker's name must be a DNS label (lower-case letters, digits and '-', at most ${NAME_MAX} characters, starting and ending with a letter or digit), e.g. '${sanitise(name)}'`;
}

/** In a pod: its name (POD_NAME, else HOSTNAME); elsewhere <host>-<pid>. */
export function defaultName(env: NodeJS.ProcessEnv = process.env): string {
  if (env.POD_NAME) return sanitise(env.POD_NAME);
  if (env.KUBERNETES_SERVICE_HOST && env.HOSTNAME) return sanitise(env.HOSTNAME);
  const suffix = `-${process.pid}`;
  return sanitise(hostname().split('.')[0]).slice(0, NAME_MAX - suffix.length).replace(/-+$/, '') + suffix;
}

export function podOwner(env: NodeJS.ProcessEnv = process.env): Obj | undefined {
  if (env.POD_NAME && env.POD_UID) return { apiVersion: 'v1', kind: 'Pod', name: env.POD_NAME, uid: env.POD_UID };
  return undefined;
}

const newIncarnation = () => randomBytes(4).toString('hex');

/** Resolves on wake() or after ms, whichever is first. */
class Wakeup {
  private resolve: (() => void) | undefined;
  private pending = false;

  wake(): void {
    this.pending = true;
    this.resolve?.();
  }

  async wait(ms: number): Promise<void> {
    if (this.pending) {
      this.pending = false;
      return;
    }
    await new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      this.resolve = done;
      function done() {
        clearTimeout(timer);
        resolve();
      }
    });
    this.resolve = undefined;
    this.pending = false;
  }
}

export class Registration {
  incarnation = newIncarnation();
  readonly incarnations = new Set([this.incarnation]);
  takenOverReason: string | undefined;
  private ackedAt = 0;
  private ackedSeconds = 0;
  private readonly nudge = new Wakeup();
  private stopped = false;
  private readonly p: string;
  private onTaken: (() => void) | undefined;

  constructor(private readonly kube: Kube, private readonly namespace: string, readonly name: string,
              private readonly offer: () => Offer, private readonly results: () => WorkerResult[],
              private readonly onLost: (why: string) => void, private readonly log: Logger,
              private readonly owner?: Obj, private readonly user?: string,
              private readonly progress: () => WorkerProgress[] = () => []) {
    this.p = path('workers', namespace, name);
  }

  get holder(): string {
    return `${this.name}/${this.incarnation}`;
  }

  get takenOver(): boolean {
    return this.takenOverReason !== undefined;
  }

  whenTakenOver(callback: () => void): void {
    this.onTaken = callback;
  }

  private spec(offer: Offer): WorkerSpec {
    const spec: WorkerSpec = {
      incarnation: this.incarnation, queues: [...offer.queues].sort(), handlers: [...offer.handlers].sort(),
      slots: Math.max(0, offer.slots), leaseDurationSeconds: offer.leaseSeconds, draining: offer.draining,
      renewTime: formatTime(new Date()), results: this.results(),
    };
    if (this.user) spec.user = this.user;
    // The latest progress of each running attempt rides on whatever write comes next: it never makes one.
    const progress = this.progress();
    if (progress.length) spec.progress = progress;
    return spec;
  }

  private patch(expected: string, spec: Obj): Obj[] {
    return [{ op: 'test', path: '/spec/incarnation', value: expected }, { op: 'replace', path: '/spec', value: spec }];
  }

  private acked(sent: number, offer: Offer): void {
    this.ackedAt = sent;
    this.ackedSeconds = offer.leaseSeconds;
  }

  /** Create the object, or take it over from an earlier process of the same name. */
  register(): Promise<void> {
    return this.registerAs(undefined, 60_000);
  }

  private async registerAs(expected: string | undefined, timeoutMs: number): Promise<void> {
    for (let i = 0; i < 20; i++) {
      const offer = this.offer();
      const sent = monotonic();
      const spec = this.spec(offer);
      if (expected === undefined) {
        const metadata: Obj = { name: this.name, namespace: this.namespace, labels: { [LABEL_WORKER]: this.name },
                                finalizers: [FINALIZER] };
        if (this.owner) metadata.ownerReferences = [this.owner];
        try {
          await this.kube.request('POST', path('workers', this.namespace),
            { body: { apiVersion: API_VERSION, kind: 'Worker', metadata, spec }, timeoutMs });
          return this.acked(sent, offer);
        } catch (err) {
          if (!(err instanceof ApiError && err.status === 409)) throw err;
        }
        const existing = await this.get(timeoutMs);
        if (!existing) continue; // gone meanwhile: create it
        if (existing.metadata?.deletionTimestamp) { // a drained predecessor, its attempts being settled
          await sleep(500);
          continue;
        }
        expected = String(existing.spec?.incarnation ?? '');
        this.log.warn(`worker ${this.name}: taking over the name from incarnation ${expected || '<none>'}; if that process still runs, it stops`);
      }
      try {
        await this.kube.request('PATCH', this.p, { body: this.patch(expected, spec), contentType: JSON_PATCH, timeoutMs });
        return this.acked(sent, offer);
      } catch (err) {
        if (!(err instanceof ApiError)) throw err;
        if (err.status === 404) {
          expected = undefined;
          continue;
        }
        if (err.status !== 422) throw err;
        const current = await this.get(timeoutMs);
        const theirs = String(current?.spec?.incarnation ?? '');
        if (!current) expected = undefined;
        else if (theirs === this.incarnation) return this.acked(sent, offer); // an earlier try landed
        else if (theirs === expected) throw err; // the test held: the API refused the spec itself
        else if (this.incarnations.has(theirs)) expected = theirs;
        else if (this.incarnations.has(expected)) throw new TakenOver(`its Worker object was taken over by incarnation ${theirs || '<none>'}`);
        else expected = undefined;
      }
    }
    throw new ApiError(0, `worker ${this.name}: could not register (its object kept changing)`);
  }

  private async get(timeoutMs: number): Promise<Obj | undefined> {
    try {
      return await this.kube.request('GET', this.p, { timeoutMs: Math.max(1, timeoutMs) });
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) return undefined;
      throw err;
    }
  }

  /** The object as watched names this incarnation: another process's means a takeover. */
  seen(incarnation: string | undefined): void {
    if (incarnation && !this.incarnations.has(incarnation) && !this.takenOver) {
      this.taken(`its Worker object was taken over by incarnation ${incarnation}`);
    }
  }

  private taken(why: string): void {
    this.takenOverReason = why;
    this.log.error(`worker ${this.name}: ${why}; its attempts are no longer its own`);
    this.onTaken?.();
  }

  /** Something to write: at once if no write is in flight, else right after it. */
  changed(): void {
    this.nudge.wake();
  }

  stop(): void {
    this.stopped = true;
    this.nudge.wake();
  }

  /** Write until stopped or taken over. */
  async run(): Promise<void> {
    while (!this.takenOver && !this.stopped) {
      await this.nudge.wait((this.offer().leaseSeconds / 3) * 1000);
      if (this.stopped) return;
      try {
        const lost = await this.writeUntilAcked();
        if (lost) await this.registerAgain(lost);
      } catch (err) {
        if (err instanceof TakenOver) this.taken(err.message);
        else throw err;
      }
    }
  }

  /** One write, retried until it lands (undefined) or the attempts are lost (why). */
  private async writeUntilAcked(): Promise<string | undefined> {
    let delay = 200;
    let problem = 'no answer';
    for (;;) {
      const offer = this.offer();
      const renewDeadline = Math.min(offer.leaseSeconds, this.ackedSeconds) * RENEW_DEADLINE * 1000;
      const deadline = this.ackedAt + renewDeadline;
      const sent = monotonic();
      if (sent >= deadline) {
        return `no write acknowledged within its renew deadline (${renewDeadline / 1000}s, of a leaseDuration of ${this.ackedSeconds}s): ${problem}`;
      }
      try {
        await this.kube.request('PATCH', this.p, { body: this.patch(this.incarnation, this.spec(offer)),
                                                   contentType: JSON_PATCH, timeoutMs: deadline - sent });
        this.acked(sent, offer);
        return undefined;
      } catch (err) {
        if (!(err instanceof ApiError)) throw err;
        if (err.status === 404) return 'its Worker object was deleted';
        problem = err.message;
        if (err.status === 422) {
          let current: Obj | undefined;
          try {
            current = await this.get(deadline - monotonic());
          } catch (again) {
            problem = (again as Error).message;
          }
          const theirs = String(current?.spec?.incarnation ?? '');
          if (current && !this.incarnations.has(theirs)) throw new TakenOver(`its Worker object was taken over by incarnation ${theirs || '<none>'}`);
        }
      }
      this.log.warn(`worker ${this.name}: cannot write its Worker object: ${problem}`);
      await sleep(Math.max(0, Math.min(delay, deadline - monotonic())));
      delay = Math.min(delay * 2, Math.max(200, (offer.leaseSeconds / 6) * 1000));
    }
  }

  /** Its attempts are lost: stop them, then register with a new incarnation, retrying until the API answers
   * (never exit: a worker that outlived an outage serves again). */
  private async registerAgain(why: string): Promise<void> {
    this.log.error(`worker ${this.name}: ${why}; its attempts are no longer its own: registering again`);
    this.onLost(why);
    const expected = why === 'its Worker object was deleted' ? undefined : this.incarnation;
    this.incarnation = newIncarnation();
    this.incarnations.add(this.incarnation);
    let delay = 500;
    while (!this.stopped) {
      try {
        await this.registerAs(expected, REGISTER_TIMEOUT_MS);
        this.log.info(`worker ${this.name} registered again as ${this.holder}`);
        return;
      } catch (err) {
        if (err instanceof TakenOver) throw err;
        this.log.warn(`worker ${this.name}: cannot register again yet: ${(err as Error).message}`);
      }
      await sleep(delay);
      delay = Math.min(delay * 2, REGISTER_BACKOFF_MAX_MS);
    }
  }

  /** At the end of a drain: delete the object unless another process holds it by now. */
  async delete(): Promise<void> {
    if (this.takenOver) return;
    for (let i = 0; i < 3; i++) {
      try {
        const current = await this.kube.request('GET', this.p);
        if (!this.incarnations.has(String(current.spec?.incarnation))) return;
        await this.kube.request('DELETE', this.p, { body: { kind: 'DeleteOptions', apiVersion: 'v1',
          preconditions: { resourceVersion: current.metadata.resourceVersion } } });
        return;
      } catch (err) {
        if (err instanceof ApiError && err.status === 404) return;
        if (err instanceof ApiError && err.status === 409) continue; // the operator wrote its status meanwhile
        this.log.warn(`worker ${this.name}: cannot delete its Worker object: ${(err as Error).message}`);
        return;
      }
    }
  }
}
