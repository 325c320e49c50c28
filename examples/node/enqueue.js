// Enqueue from a Node app that only creates jobs: node enqueue.js [ORDER_ID]. Run it twice: the idempotency key
// makes the second create return the first job.
import { Sextant } from '@sextant/node';

const orderId = Number(process.argv[2] ?? 42);
const sextant = new Sextant(); // the kubeconfig's namespace, else "default"; new Sextant({ namespace: 'shop' })
const job = await sextant.jobs.create({
  queue: 'payments',
  handler: 'charge-card',
  payload: { orderId },
  idempotencyKey: `charge-${orderId}`,
});
console.log(`${job.created ? 'created' : 'already there:'} ${job.id} (${job.state || 'new'})`);
