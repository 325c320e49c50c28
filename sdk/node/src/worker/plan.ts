// Which queues and handlers a worker serves (docs/workers.md, "Which handlers run on workers"; the Python worker's
// plan.py): a Handler with spec.worker that it can run — a command it is allowed to run, or a function defined with
// defineHandler. At start every mismatch is a PlanError naming it (exit code 2); later the same rules apply quietly.

export class PlanError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PlanError';
  }
}

/** true: every Handler's command (--allow-commands); else these Handlers' (--allow-command), none by default. */
export type AllowCommands = boolean | ReadonlySet<string>;

import type { HandlerSpec } from '../generated/wire.js';

export interface Served {
  queues: Set<string>;
  commands: Map<string, string[]>;
  functions: Set<string>;
  refused: Set<string>; // command handlers it may not run: not offered
}

const ALLOW_HINT = (name: string) => `--allow-command ${name} (or --allow-commands)`;

export function commandAllowed(allow: AllowCommands, handler: string): boolean {
  return allow === true || (typeof allow !== 'boolean' && allow.has(handler));
}

export function servedHandlers(served: Served): Set<string> {
  return new Set([...served.commands.keys(), ...served.functions]);
}

export function serving(queues: Iterable<string>, handlers: Map<string, HandlerSpec>, functions: Set<string>,
                        wantQueues?: Set<string>, wantHandlers?: Set<string>, allow: AllowCommands = false): Served {
  const commands = new Map<string, string[]>();
  const byFunction = new Set<string>();
  const refused = new Set<string>();
  for (const [name, spec] of handlers) {
    if (!spec.worker || (wantHandlers && !wantHandlers.has(name))) continue;
    if (spec.worker.command?.length) {
      if (commandAllowed(allow, name)) commands.set(name, [...spec.worker.command]);
      else refused.add(name);
    } else if (functions.has(name)) byFunction.add(name);
  }
  return { queues: new Set(wantQueues ?? queues), commands, functions: byFunction, refused };
}

/** What to serve at start; PlanError for the first thing that is wrong. */
export function plan(namespace: string, queues: Set<string>, handlers: Map<string, HandlerSpec>, functions: Set<string>,
                     wantQueues?: Set<string>, wantHandlers?: Set<string>, allow: AllowCommands = false): Served {
  const where = `in namespace ${namespace}`;
  for (const queue of [...(wantQueues ?? [])].sort()) {
    if (!queues.has(queue)) throw new PlanError(`--queue ${queue}: there is no Queue '${queue}' ${where}`);
  }
  if (!wantQueues && queues.size === 0) {
    throw new PlanError(`there is no Queue ${where} to serve: create one (kubectl apply -f a Queue), or name the namespace with -n`);
  }
  for (const name of [...functions].sort()) {
    if (wantHandlers && !wantHandlers.has(name)) continue;
    const spec = handlers.get(name);
    if (!spec) throw new PlanError(`handler '${name}' is defined by --module, but there is no Handler '${name}' ${where}: apply one with \`spec: {worker: {}}\``);
    if (!spec.worker) throw new PlanError(`handler '${name}' is defined by --module, but Handler '${name}' runs its jobs in pods (spec.template): set \`spec: {worker: {}}\` instead for a worker to serve it`);
    if (spec.worker.command?.length) throw new PlanError(`handler '${name}' is defined by --module, but Handler '${name}' says to run the command ${JSON.stringify(spec.worker.command)}: keep one of the two`);
  }
  const onWorkers = (flag: string, name: string): HandlerSpec => {
    const spec = handlers.get(name);
    if (!spec) throw new PlanError(`${flag} ${name}: there is no Handler '${name}' ${where}`);
    if (!spec.worker) throw new PlanError(`${flag} ${name}: Handler '${name}' runs its jobs in pods (spec.template), not on workers (spec.worker)`);
    return spec;
  };
  if (typeof allow !== 'boolean') for (const name of [...allow].sort()) onWorkers('--allow-command', name);
  for (const name of [...(wantHandlers ?? [])].sort()) {
    const spec = onWorkers('--handler', name);
    if (spec.worker?.command?.length && !commandAllowed(allow, name)) {
      throw new PlanError(`--handler ${name}: Handler '${name}' runs the command ${JSON.stringify(spec.worker.command)}, and this worker runs no Handler's command unless told to: give ${ALLOW_HINT(name)}`);
    }
    if (!spec.worker?.command?.length && !functions.has(name)) {
      throw new PlanError(`--handler ${name}: Handler '${name}' is an SDK function (spec.worker without a command), and no --module defines it`);
    }
  }
  const served = serving(queues, handlers, functions, wantQueues, wantHandlers, allow);
  if (servedHandlers(served).size === 0) {
    if (served.refused.size) {
      throw new PlanError(`nothing to serve: no --module defines a handler, and the Handlers ${where} with spec.worker.command (${[...served.refused].sort().join(', ')}) run commands, which this worker runs only when told to: give ${ALLOW_HINT('NAME')}`);
    }
    throw new PlanError(`nothing to serve: no --module defines a handler, and no Handler ${where} has spec.worker.command`);
  }
  return served;
}
