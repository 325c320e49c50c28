export { defineHandler, NonRetryableError, Snooze, NON_RETRYABLE_EXIT_CODE, type Context, type Handler, type HandlerFunction, type Job } from './handlers.js';
export { Sextant, JobsApi, QueuesApi, KeyConflict, Refused, type BulkOutcome, type CreateJob, type CreateResult, type JobRecord, type ListJobs, type SextantOptions } from './client.js';
export { InputError } from './common.js';
export { ApiError } from './kube.js';
export { createWorker, Worker, WorkerStopped, PlanError, type WorkerOptions } from './worker/index.js';
