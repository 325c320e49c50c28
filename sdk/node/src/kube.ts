// Kubernetes access: configuration and credentials through @kubernetes/client-node (a kubeconfig file, KUBECONFIG,
// ~/.kube/config, the in-cluster service account, exec credential plugins, client certificates), requests through
// node's own http(s) with that library's TLS options and Authorization header. A request of our own rather than the
// library's generated clients: a worker needs a deadline on every request (its renewals must not outlive its renew
// deadline), JSON patches with a `test`, and watches it can abort and resume after an API-server outage.
import * as http from 'node:http';
import * as https from 'node:https';
import { KubeConfig } from '@kubernetes/client-node';
import { GROUP, VERSION } from './generated/wire.js';

export { GROUP, VERSION };
export const API_VERSION = `${GROUP}/${VERSION}`;

export type Obj = Record<string, any>;

/** An answer of the API server that is not a success; `status` is its HTTP status (0: no answer at all). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly reason: string = '',
    readonly body: unknown = undefined,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

export interface ConnectOptions {
  /** A kubeconfig file; default: KUBECONFIG, ~/.kube/config, else the in-cluster service account. */
  kubeconfig?: string;
  /** A context of the kubeconfig; default its current context. */
  context?: string;
}

export interface RequestOptions {
  body?: unknown;
  contentType?: string;
  query?: Record<string, string | undefined>;
  /** Milliseconds before the request is abandoned (an ApiError with status 0). */
  timeoutMs?: number;
}

export function path(plural: string, namespace?: string, name?: string, group = true): string {
  const base = group ? `/apis/${API_VERSION}` : '/api/v1';
  return `${base}${namespace ? `/namespaces/${namespace}` : ''}/${plural}${name ? `/${name}` : ''}`;
}

export class Kube {
  readonly server: URL;
  private agent: http.Agent | undefined;

  private constructor(readonly config: KubeConfig) {
    const cluster = config.getCurrentCluster();
    if (!cluster) throw new Error('the kubeconfig names no cluster for its current context');
    this.server = new URL(cluster.server);
  }

  static load(options: ConnectOptions = {}): Kube {
    const config = new KubeConfig();
    if (options.kubeconfig) config.loadFromFile(options.kubeconfig);
    else config.loadFromDefault();
    if (options.context) {
      if (!config.getContextObject(options.context)) {
        throw new Error(`--context ${options.context}: the kubeconfig has no such context`);
      }
      config.setCurrentContext(options.context);
    }
    // A plain-http server (a local API server on loopback) has no TLS to verify; the library refuses http unless
    // told to skip verification, which means nothing there.
    config.clusters = config.clusters.map((c) => (c.server.startsWith('http:') ? { ...c, skipTLSVerify: true } : c));
    return new Kube(config);
  }

  /** The current context's namespace (in a pod: the service account's), if it names one. */
  get namespace(): string | undefined {
    return this.config.getContextObject(this.config.getCurrentContext())?.namespace || undefined;
  }

  private async options(): Promise<https.RequestOptions> {
    const opts: https.RequestOptions = {};
    await this.config.applyToHTTPSOptions(opts); // credentials may change (exec plugins): asked per request
    if (!this.agent) {
      const tls = { ca: opts.ca, cert: opts.cert, key: opts.key, rejectUnauthorized: opts.rejectUnauthorized,
                    servername: opts.servername, keepAlive: true };
      this.agent = this.server.protocol === 'https:' ? new https.Agent(tls) : new http.Agent({ keepAlive: true });
    }
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(opts.headers ?? {})) if (v !== undefined) headers[k] = String(v);
    if (opts.auth) headers.Authorization = `Basic ${Buffer.from(opts.auth).toString('base64')}`;
    return { agent: this.agent, headers };
  }

  private url(p: string, query?: Record<string, string | undefined>): URL {
    const url = new URL(this.server.pathname.replace(/\/$/, '') + p, this.server);
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) url.searchParams.set(k, v);
    return url;
  }

  /** One request; the answer's JSON. ApiError for an error answer, or none within timeoutMs. */
  async request(method: string, p: string, options: RequestOptions = {}): Promise<Obj> {
    let base: https.RequestOptions;
    try {
      base = await this.options();
    } catch (err) {
      // A credential refresh that failed (an exec plugin, a token file) is a request that could not be sent, as a
      // refused connection is: its callers retry it, and a worker fences itself in time rather than exit.
      throw new ApiError(0, `${method} ${p}: no credentials: ${(err as Error).message}`);
    }
    const url = this.url(p, options.query);
    const payload = options.body === undefined ? undefined : Buffer.from(JSON.stringify(options.body));
    const headers: Record<string, string> = { ...(base.headers as Record<string, string>), Accept: 'application/json',
      'User-Agent': 'sextant-node' };
    if (payload) {
      headers['Content-Type'] = options.contentType ?? 'application/json';
      headers['Content-Length'] = String(payload.length);
    }
    const timeoutMs = Math.max(1, options.timeoutMs ?? 30_000);
    const transport = url.protocol === 'https:' ? https : http;
    return await new Promise<Obj>((resolve, reject) => {
      const req = transport.request(url, { method, agent: base.agent, headers }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', (e) => reject(new ApiError(0, `${method} ${p}: ${e.message}`)));
        res.on('end', () => {
          clearTimeout(timer);
          const text = Buffer.concat(chunks).toString('utf8');
          let body: any = undefined;
          try { body = text ? JSON.parse(text) : {}; } catch { body = text; }
          const status = res.statusCode ?? 0;
          if (status >= 200 && status < 300) resolve(body ?? {});
          else reject(apiError(status, body, method, p));
        });
      });
      const timer = setTimeout(() => req.destroy(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
      req.on('error', (e) => { clearTimeout(timer); reject(new ApiError(0, `${method} ${p}: ${e.message}`)); });
      if (payload) req.write(payload);
      req.end();
    });
  }

  /** Every item of a list (in pages) and the list's resourceVersion. */
  async list(p: string, query: Record<string, string | undefined> = {}): Promise<{ items: Obj[]; resourceVersion: string }> {
    const items: Obj[] = [];
    let token: string | undefined;
    for (;;) {
      const page = await this.request('GET', p, { query: { ...query, limit: '500', continue: token } });
      items.push(...(page.items ?? []));
      token = page.metadata?.continue || undefined;
      if (!token) return { items, resourceVersion: page.metadata?.resourceVersion ?? '' };
    }
  }

  /** A watch from resourceVersion: onEvent(type, object) per event until the server ends it (resolves), the
   * connection fails or stays silent past the server's timeout (ApiError status 0), or `signal` aborts it. */
  async watch(p: string, query: Record<string, string | undefined>, onEvent: (type: string, obj: Obj) => void,
              signal: AbortSignal): Promise<void> {
    const base = await this.options();
    const seconds = Number(query.timeoutSeconds ?? '300');
    const url = this.url(p, { ...query, watch: 'true', allowWatchBookmarks: 'true', timeoutSeconds: String(seconds) });
    const transport = url.protocol === 'https:' ? https : http;
    await new Promise<void>((resolve, reject) => {
      const req = transport.request(url, { method: 'GET', agent: base.agent, headers: base.headers as any, signal },
        (res) => {
          if ((res.statusCode ?? 0) >= 300) {
            const chunks: Buffer[] = [];
            res.on('data', (c: Buffer) => chunks.push(c));
            res.on('end', () => {
              let body: any = Buffer.concat(chunks).toString('utf8');
              try { body = JSON.parse(body); } catch { /* text */ }
              reject(apiError(res.statusCode ?? 0, body, 'WATCH', p));
            });
            return;
          }
          let partial = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => {
            const lines = (partial + chunk).split('\n');
            partial = lines.pop() ?? '';
            for (const line of lines) {
              if (!line.trim()) continue;
              let event: Obj;
              try { event = JSON.parse(line); } catch { continue; }
              if (event.type === 'ERROR') {
                const st = event.object ?? {};
                req.destroy();
                reject(new ApiError(st.code ?? 500, `watch ${p}: ${st.message ?? 'failed'}`, st.reason ?? ''));
                return;
              }
              onEvent(event.type, event.object);
            }
          });
          res.on('end', () => resolve());
          res.on('error', (e) => reject(new ApiError(0, `watch ${p}: ${e.message}`)));
        });
      // A connection that went silent (the API server vanished without a FIN): the server ends every watch
      // within timeoutSeconds, bookmarks keep it talking, so silence beyond that means it is gone.
      req.setTimeout((seconds + 30) * 1000, () => req.destroy(new Error('the watch went silent')));
      req.on('error', (e) => {
        if (signal.aborted) resolve();
        else reject(new ApiError(0, `watch ${p}: ${e.message}`));
      });
      req.end();
    });
  }
}

function apiError(status: number, body: any, method: string, p: string): ApiError {
  const message = typeof body === 'object' && body?.message ? body.message : String(body ?? '').slice(0, 500);
  const reason = typeof body === 'object' && body?.reason ? body.reason : '';
  return new ApiError(status, `${method} ${p}: ${status} ${reason}: ${message}`.replace(': :', ':'), reason, body);
}

/** list + watch of one path, resumed after every end and error (410: listed again), until stop(). Delivers
 * 'upsert' and 'delete' with the object, and 'relist' after a list (objects gone meanwhile are deleted). */
export class Informer {
  private readonly abort = new AbortController();
  private known = new Map<string, Obj>();

  constructor(
    private readonly kube: Kube,
    private readonly p: string,
    private readonly on: (kind: 'upsert' | 'delete', obj: Obj) => void,
    private readonly fieldSelector?: string,
    private readonly log: (message: string) => void = () => {},
  ) {}

  stop(): void {
    this.abort.abort();
  }

  async run(): Promise<void> {
    let version = '';
    let delay = 200;
    while (!this.abort.signal.aborted) {
      try {
        if (!version) {
          const { items, resourceVersion } = await this.kube.list(this.p, { fieldSelector: this.fieldSelector });
          const seen = new Map(items.map((o) => [o.metadata.name as string, o]));
          for (const [name, obj] of this.known) if (!seen.has(name)) this.on('delete', obj);
          for (const obj of items) this.on('upsert', obj);
          this.known = seen;
          version = resourceVersion;
        }
        await this.kube.watch(this.p, { resourceVersion: version, fieldSelector: this.fieldSelector }, (type, obj) => {
          if (obj?.metadata?.resourceVersion) version = obj.metadata.resourceVersion;
          if (type === 'ADDED' || type === 'MODIFIED') {
            this.known.set(obj.metadata.name, obj);
            this.on('upsert', obj);
          } else if (type === 'DELETED') {
            this.known.delete(obj.metadata.name);
            this.on('delete', obj);
          }
        }, this.abort.signal);
        delay = 200;
      } catch (err) {
        if (this.abort.signal.aborted) return;
        if (err instanceof ApiError && err.status === 410) version = '';
        else {
          this.log(`watch of ${this.p}: ${(err as Error).message}; resuming`);
          version = '';  // after an outage, list again: events may be gone
          await sleep(delay, this.abort.signal);
          delay = Math.min(delay * 2, 5000);
        }
      }
    }
  }
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, Math.max(0, ms));
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
