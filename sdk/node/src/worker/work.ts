// Running one attempt's handler (the Python worker's runner/execution.py): a function defined with defineHandler on
// this event loop, or a Handler's command as a subprocess in its own process group with the payload (JSON) on stdin.
// Exit codes as everywhere in Sextant: 0 on return, 1 on an error, 86 for NonRetryableError, 128+N after signal N
// (143 for a function that ended by its abort signal), 127 for a command that cannot start.
import { spawn, ChildProcess } from 'node:child_process';
import { accessSync, constants as fsConstants, fstatSync, mkdtempSync, openSync, readSync, closeSync, rmSync, statSync } from 'node:fs';
import { constants, tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { OUTPUT_MAX_BYTES, SNOOZE_EXIT_CODE, outputJson, parseProgressLine, shortNumber, snoozeSeconds } from '../common.js';
import { PROTOCOL } from '../generated/protocol.js';
import { NON_RETRYABLE_EXIT_CODE, type Context, type HandlerFunction, type Job } from '../handlers.js';

export interface Ended {
  exitCode: number | null; // null: the handler never started
  message?: string;
  /** What it returned, as compact JSON within the cap (the result's output). */
  output?: string;
  /** Why its output is not kept (the result's outputNote). */
  outputNote?: string;
  /** A snooze's delay (exit code 85). */
  snoozeSeconds?: number;
}

export const PROGRESS_FILE_ENV = PROTOCOL.progressFileEnv; // "0.4 resized 4/10": read every second while it runs
const PROGRESS_POLL_MS = 1000;
const PROGRESS_TAIL = 4096; // bytes of SEXTANT_PROGRESS_FILE read, from its end: its latest line
const SNOOZE_HEAD = 100; // bytes of SEXTANT_SNOOZE_FILE read: a delay such as 30s
export const SNOOZE_FILE_ENV = PROTOCOL.snoozeFileEnv; // the delay ("30s", or seconds) when it exits 85

export function snoozed(seconds: number): Ended {
  return { exitCode: SNOOZE_EXIT_CODE, message: `snoozed for ${shortNumber(seconds)}s`, snoozeSeconds: seconds };
}

export const OUTPUT_FILE_ENV = PROTOCOL.outputFileEnv; // JSON written there is the output (read when it exits 0)

/** A handler that returned `value`: succeeded, its output kept when it is JSON within the cap (else why not, also
 * said in its output after `note`). */
export function returned(value: unknown, note: string): Ended {
  const { json, note: why } = outputJson(value);
  const ended: Ended = { exitCode: 0 };
  if (json !== undefined) ended.output = json;
  if (why !== undefined) ended.outputNote = why;
  return said(ended, note);
}

/**
 * At most `limit` bytes of a file a command wrote (its last ones with tail), whatever the command made of it: a file
 * that grows without end, a link to /dev/zero, a FIFO (opened without waiting for a writer: not a regular file,
 * refused). The worker's event loop reads it, so the read must stay small and never block.
 */
export function readBounded(file: string, limit: number, tail = false): Buffer {
  const fd = openSync(file, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK);
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) throw new Error(`${file.split('/').pop()} is not a regular file`);
    const buffer = Buffer.alloc(limit);
    const from = tail ? Math.max(0, stat.size - limit) : 0;
    return buffer.subarray(0, readSync(fd, buffer, 0, limit, from));
  } finally {
    closeSync(fd);
  }
}

function said(ended: Ended, note: string): Ended {
  if (ended.outputNote) process.stderr.write(`${note} ${ended.outputNote}\n`);
  return ended;
}

export interface Work {
  run(): Promise<Ended>;
  terminate(reason: string): void;
  kill(): void;
}

export const TERMINATED = 143;
export const KILLED = 137;
const COMMAND_NOT_FOUND = 127;
const GIVE_UP_AFTER_KILL_MS = 1000;
const TAIL_LINES = 80, TAIL_BYTES = 2048, TAIL_KEPT = 16 * 1024, LONG_LINE = 64 * 1024;

/** The reason a stopped attempt's ctx.signal carries: an AbortError whose `stop` says why. */
export class Stopped extends Error {
  constructor(readonly stop: string) {
    super(`the attempt was stopped: ${stop}`);
    this.name = 'AbortError';
  }
}

function describe(err: unknown): string {
  if (err instanceof Error) return `${err.name}: ${err.message}`;
  return `Error: ${String(err)}`;
}

/** A handler function. It cannot be killed: a stop aborts ctx.signal, and one that ignores it is given up on. */
export class FunctionWork implements Work {
  constructor(private readonly fn: HandlerFunction, private readonly job: Job, private readonly ctx: Context,
              private readonly abort: AbortController, private readonly label: string) {}

  async run(): Promise<Ended> {
    try {
      return returned(await this.fn(this.job, this.ctx), this.label);
    } catch (err) {
      const e = err as any;
      if (e?.name === 'Snooze' && typeof e.seconds === 'number') return snoozed(e.seconds);
      if (e?.name === 'NonRetryableError') {
        process.stderr.write(`${this.label} non-retryable: ${e.message}\n`);
        return { exitCode: NON_RETRYABLE_EXIT_CODE, message: `NonRetryableError: ${e.message}` };
      }
      if (this.abort.signal.aborted && (err === this.abort.signal.reason || e?.name === 'AbortError')) {
        return { exitCode: TERMINATED, message: 'cancelled' };
      }
      const text = err instanceof Error ? (err.stack ?? describe(err)) : describe(err);
      process.stderr.write(text.split('\n').map((line) => `${this.label} ${line}\n`).join(''));
      return { exitCode: 1, message: describe(err) };
    }
  }

  terminate(reason: string): void {
    if (!this.abort.signal.aborted) this.abort.abort(new Stopped(reason));
  }

  kill(): void {}
}

/** A supervising process that SIGKILLs the process groups of this worker's commands when this process dies, however
 * it dies (its end of the pipe closes): node cannot set PR_SET_PDEATHSIG, and a SIGKILLed worker must not leave a
 * command running while its attempt is retried elsewhere. */
const REAPER = `
process.on('SIGINT', () => {}); process.on('SIGTERM', () => {});
const groups = new Set(); let rest = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => {
  const lines = (rest + chunk).split('\\n'); rest = lines.pop();
  for (const l of lines) { const n = Number(l.slice(1)); if (n > 0) (l[0] === '+' ? groups.add(n) : groups.delete(n)); }
});
process.stdin.on('end', () => { for (const g of groups) { try { process.kill(-g, 'SIGKILL'); } catch {} } process.exit(0); });
`;

export class Reaper {
  private readonly proc: ChildProcess;

  constructor() {
    this.proc = spawn(process.execPath, ['-e', REAPER], { stdio: ['pipe', 'ignore', 'inherit'], detached: true });
    this.proc.stdin!.on('error', () => {}); // gone: nothing to tell it
    this.proc.unref();
  }

  /** Its pipe, for a command to announce itself on (fd 3) before it execs. */
  get pipe(): NodeJS.WritableStream {
    return this.proc.stdin!;
  }

  say(line: string): void {
    if (this.proc.stdin && !this.proc.stdin.destroyed) this.proc.stdin.write(`${line}\n`);
  }

  close(): void {
    this.proc.stdin?.end();
  }
}

/** Run by sh between our spawn and the command's exec: the command's process group (its pid, after the setsid of
 * `detached`) is told to the reaper by the command itself, in one write of less than PIPE_BUF bytes. Told by us after
 * the spawn, a worker SIGKILLed in between would leave a command running that no one knows of (node has no preexec).
 * The reaper's pipe is closed before the exec, so the reaper sees its end when we and every announcing child are gone. */
const ANNOUNCE = 'printf "+%s\\n" $$ >&3; exec 3>&-; exec "$@"';

/** Throws as spawn would (ENOENT, EACCES) when `command` cannot be executed: run through sh, a missing command would
 * otherwise be told apart from one that exits 127 only by sh's wording. */
function checkStartable(command: string, path: string | undefined): void {
  const executable = (file: string): boolean => {
    try {
      accessSync(file, fsConstants.X_OK);
      return statSync(file).isFile();
    } catch {
      return false;
    }
  };
  if (command.includes('/')) {
    accessSync(command, fsConstants.X_OK); // its own error: ENOENT or EACCES
    return;
  }
  if ((path ?? '').split(delimiter).some((dir) => dir && executable(join(dir, command)))) return;
  throw Object.assign(new Error(`${command}: no such command on PATH`), { code: 'ENOENT' });
}

/** A command handler: one process per attempt, in its own process group, the payload on stdin, its output forwarded
 * line by line prefixed with the attempt's label; a failure's last 80 lines or 2 KiB become its message. */
export class CommandWork implements Work {
  private proc: ChildProcess | undefined;
  private terminated = false;
  private tail = Buffer.alloc(0);

  constructor(private readonly command: string[], private readonly env: Record<string, string>,
              private readonly payload: unknown, private readonly label: string, private readonly reaper?: Reaper,
              private readonly onProgress?: (fraction: number, message?: string) => void) {}

  private files = '';

  async run(): Promise<Ended> {
    // The attempt's own directory for the files it may write (its output).
    this.files = mkdtempSync(join(tmpdir(), 'sextant-attempt-'));
    try {
      const watching = this.onProgress ? setInterval(() => this.readProgress(), PROGRESS_POLL_MS) : undefined;
      try {
        return await this.spawned({ ...this.env, [OUTPUT_FILE_ENV]: join(this.files, 'output.json'),
          [SNOOZE_FILE_ENV]: join(this.files, 'snooze'), [PROGRESS_FILE_ENV]: join(this.files, 'progress') });
      } finally {
        clearInterval(watching);
      }
    } finally {
      rmSync(this.files, { recursive: true, force: true });
    }
  }

  private progressSeen = '';

  /** SEXTANT_PROGRESS_FILE whenever it changes: its latest line is the attempt's progress. A line that cannot be
   * read is said in the handler's output. */
  private readProgress(): void {
    const file = join(this.files, 'progress');
    try {
      const stat = statSync(file);
      const seen = `${stat.mtimeMs}/${stat.size}`;
      if (seen === this.progressSeen) return;
      this.progressSeen = seen;
      const lines = readBounded(file, PROGRESS_TAIL, true).toString('utf8').trim().split('\n');
      if (lines.length && lines[lines.length - 1].trim()) this.onProgress?.(...parseProgressLine(lines[lines.length - 1]));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      process.stderr.write(`${this.label} ${(err as Error).message}\n`);
    }
  }

  /** Exit 0: succeeded, with the JSON the command wrote to SEXTANT_OUTPUT_FILE, if any, as its output. */
  private output(): Ended {
    let data: Buffer;
    try {
      data = readBounded(join(this.files, 'output.json'), OUTPUT_MAX_BYTES + 1);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { exitCode: 0 };
      return said({ exitCode: 0, outputNote: `${OUTPUT_FILE_ENV} cannot be read (${(err as Error).message}); not kept` }, this.label);
    }
    if (data.length > OUTPUT_MAX_BYTES) {
      return said({ exitCode: 0, outputNote: `${OUTPUT_FILE_ENV} holds over ${OUTPUT_MAX_BYTES} bytes, the output's cap; not kept` }, this.label);
    }
    let value: unknown;
    try {
      value = JSON.parse(data.toString('utf8'));
    } catch (err) {
      return said({ exitCode: 0, outputNote: `${OUTPUT_FILE_ENV} does not hold JSON (${(err as Error).message}); not kept` }, this.label);
    }
    return returned(value, this.label);
  }

  /** Exit 85: snoozed for the delay in SEXTANT_SNOOZE_FILE; without a valid one the attempt fails, with why. */
  private snooze(): Ended {
    let why: string;
    try {
      return snoozed(snoozeSeconds(readBounded(join(this.files, 'snooze'), SNOOZE_HEAD).toString('utf8')));
    } catch (err) {
      why = (err as NodeJS.ErrnoException).code === 'ENOENT'
        ? `${SNOOZE_FILE_ENV} was not written (write a delay such as 30s there before exit ${SNOOZE_EXIT_CODE})`
        : `${SNOOZE_FILE_ENV}: ${(err as Error).message}`;
    }
    process.stderr.write(`${this.label} ${why}\n`);
    return { exitCode: SNOOZE_EXIT_CODE, message: why };
  }

  private spawned(env: Record<string, string>): Promise<Ended> {
    return new Promise((resolve) => {
      let proc: ChildProcess;
      try {
        if (this.reaper) checkStartable(this.command[0], env.PATH);
        const [file, ...args] = this.reaper ? ['/bin/sh', '-c', ANNOUNCE, this.command[0], ...this.command] : this.command;
        proc = spawn(file, args, { stdio: ['pipe', 'pipe', 'pipe', ...(this.reaper ? [this.reaper.pipe as never] : [])],
          env, detached: true });
      } catch (err) {
        return resolve(this.notStarted(err));
      }
      this.proc = proc;
      let spawned = false;
      proc.on('error', (err) => { if (!spawned) resolve(this.notStarted(err)); });
      proc.on('spawn', () => {
        spawned = true;
        if (this.terminated) this.terminate();
      });
      const streams = [proc.stdout!, proc.stderr!].map((s) => this.forward(s));
      proc.stdin!.on('error', () => {}); // a handler that does not read its payload
      proc.stdin!.end(JSON.stringify(this.payload));
      proc.on('exit', async (code, signal) => {
        if (!spawned) return;
        const exitCode = code ?? 128 + (signal ? constants.signals[signal] : 0);
        this.signalGroup('SIGKILL'); // what it left behind goes with it, as with a pod's container
        this.reaper?.say(`-${proc.pid}`);
        await Promise.race([Promise.all(streams), new Promise((r) => setTimeout(r, 5000))]);
        if (exitCode === 0) return resolve(this.output());
        if (exitCode === SNOOZE_EXIT_CODE) return resolve(this.snooze());
        const lines = this.tail.toString('utf8').split(/(?<=\n)/).slice(-TAIL_LINES);
        const text = lines.join('').trim().slice(-TAIL_BYTES);
        resolve({ exitCode, message: text || `exit code ${exitCode}` });
      });
    });
  }

  private notStarted(err: unknown): Ended {
    const e = err as NodeJS.ErrnoException;
    process.stderr.write(`${this.label} cannot start '${this.command[0]}': ${e.message}\n`);
    return { exitCode: COMMAND_NOT_FOUND, message: `cannot start '${this.command[0]}': ${e.code ?? e.message}` };
  }

  /** Copy a stream to our stdout, each line prefixed; a line of any length passes (cut every 64 KiB). */
  private forward(stream: NodeJS.ReadableStream): Promise<void> {
    const prefix = `${this.label} `;
    let partial = '';
    stream.setEncoding('utf8');
    return new Promise((resolve) => {
      stream.on('data', (chunk: string) => {
        const bytes = Buffer.from(chunk);
        this.tail = Buffer.concat([this.tail, bytes]);
        if (this.tail.length > TAIL_KEPT) this.tail = this.tail.subarray(this.tail.length - TAIL_KEPT);
        const lines = (partial + chunk).split('\n');
        partial = lines.pop() ?? '';
        let out = lines.map((line) => `${prefix}${line}\n`).join('');
        if (partial.length >= LONG_LINE) {
          out += `${prefix}${partial}\n`;
          partial = '';
        }
        if (out) process.stdout.write(out);
      });
      stream.on('end', () => {
        if (partial) process.stdout.write(`${prefix}${partial}\n`);
        resolve();
      });
      stream.on('error', () => resolve());
    });
  }

  terminate(): void {
    this.terminated = true;
    if (this.proc?.pid && this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill('SIGTERM');
  }

  kill(): void {
    this.signalGroup('SIGKILL');
  }

  private signalGroup(signal: NodeJS.Signals): void {
    if (!this.proc?.pid) return;
    try {
      process.kill(-this.proc.pid, signal);
    } catch { /* gone */ }
  }
}

/** One attempt's handler: run it, stop it (terminate, cancelGrace, kill, give up), and tell how it ended. */
export class Execution {
  stopReason: string | undefined;
  lingering: Promise<unknown> | undefined; // a handler given up on, still running
  private task: Promise<Ended> | undefined;
  private done = false;
  private giveUp: (() => void) | undefined;
  private readonly timers: NodeJS.Timeout[] = [];

  constructor(private readonly work: Work, readonly cancelGraceSeconds: number) {}

  get started(): boolean {
    return this.task !== undefined;
  }

  async run(): Promise<Ended> {
    if (this.stopReason !== undefined) return { exitCode: null, message: 'stopped before the handler started' };
    const task = this.task = this.work.run().finally(() => { this.done = true; });
    const givenUp = new Promise<'given up'>((resolve) => { this.giveUp = () => resolve('given up'); });
    const ended = await Promise.race([task, givenUp]);
    for (const t of this.timers) clearTimeout(t);
    if (ended === 'given up') {
      this.lingering = task;
      return { exitCode: KILLED, message: `the handler did not stop within cancelGrace (${this.cancelGraceSeconds}s) and was given up on` };
    }
    return ended;
  }

  /** Abort / SIGTERM now, SIGKILL (or give up) after the grace (the queue's cancelGrace unless given). */
  stop(reason: string, graceSeconds?: number): void {
    if (this.stopReason !== undefined || this.done) return;
    this.stopReason = reason;
    if (!this.task) return; // not started: run() will not start it
    this.work.terminate(reason);
    const grace = graceSeconds ?? this.cancelGraceSeconds;
    this.timers.push(setTimeout(() => this.kill(), Math.max(0, grace * 1000)));
  }

  private kill(): void {
    if (this.done) return;
    this.work.kill();
    this.timers.push(setTimeout(() => this.giveUp?.(), GIVE_UP_AFTER_KILL_MS));
  }
}

const BASE_VARIABLES = new Set(['PATH', 'HOME', 'USER', 'LOGNAME', 'LANG', 'LANGUAGE', 'TZ', 'TMPDIR']);
const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** A command's environment: never the worker's own (its Secrets, its KUBECONFIG), but a minimal base, what
 * --command-env passes, and the attempt's SEXTANT_* variables, which nothing overrides (docs/workers.md). */
export function commandEnvironment(environ: NodeJS.ProcessEnv, passed: Record<string, string>,
                                   variables: Record<string, string>): Record<string, string> {
  const base: Record<string, string> = {};
  for (const [k, v] of Object.entries(environ)) {
    if (v !== undefined && (BASE_VARIABLES.has(k) || k.startsWith('LC_'))) base[k] = v;
  }
  base.PATH ??= DEFAULT_PATH;
  return { ...base, ...passed, ...variables };
}
