// The handlers that the Node workers of configuration WN serve (`sextant-worker --module bench/workerhandlers.mjs`):
// the same no-op `ok` and `fail-first` as bench/workerhandlers.py, so WN and W differ only in the worker's language.
import { defineHandler } from '../sdk/node/dist/index.js';

export const ok = defineHandler('ok', async () => {});

export const failFirst = defineHandler('fail-first', async (job) => {
  if (job.attempt === 1) throw new Error('the benchmark fails every first attempt of this handler');
});
