// `--metrics-port`: the Python worker's Prometheus metrics that a Node worker can say — attempts by result, slots
// busy and free, results refused — as text on GET /metrics (plain HTTP, no authentication: --metrics-host decides
// who can reach it).
import { createServer, Server } from 'node:http';

const escape = (v: string) => v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
const labels = (l: Record<string, string>) => `{${Object.entries(l).map(([k, v]) => `${k}="${escape(v)}"`).join(',')}}`;

export class WorkerMetrics {
  private readonly attempts = new Map<string, number>();
  private refusedCount = 0;

  constructor(private readonly worker: string, private readonly slots: () => [number, number]) {}

  attempt(queue: string, handler: string, result: 'succeeded' | 'failed' | 'cancelled'): void {
    const key = labels({ worker: this.worker, queue, handler, result });
    this.attempts.set(key, (this.attempts.get(key) ?? 0) + 1);
  }

  refused(): void {
    this.refusedCount += 1;
  }

  text(): string {
    const [busy, all] = this.slots();
    const w = { worker: this.worker };
    return [
      '# HELP sextant_worker_attempts_total Attempts this worker ran, by how they ended as it saw them.',
      '# TYPE sextant_worker_attempts_total counter',
      ...[...this.attempts].map(([l, n]) => `sextant_worker_attempts_total${l} ${n}`),
      '# HELP sextant_worker_slots Slots of this worker, busy and free.',
      '# TYPE sextant_worker_slots gauge',
      `sextant_worker_slots${labels({ ...w, state: 'busy' })} ${busy}`,
      `sextant_worker_slots${labels({ ...w, state: 'free' })} ${Math.max(0, all - busy)}`,
      '# HELP sextant_worker_results_refused_total Results not reported: the attempt was no longer this worker\'s.',
      '# TYPE sextant_worker_results_refused_total counter',
      `sextant_worker_results_refused_total${labels(w)} ${this.refusedCount}`,
      '',
    ].join('\n');
  }

  /** Serve /metrics; rejects when the port cannot be listened on. */
  serve(port: number, host: string): Promise<Server> {
    const server = createServer((req, res) => {
      if (req.url?.split('?')[0] !== '/metrics') {
        res.writeHead(404).end();
        return;
      }
      res.writeHead(200, { 'Content-Type': 'text/plain; version=0.0.4' }).end(this.text());
    });
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.unref();
        resolve(server);
      });
    });
  }
}
