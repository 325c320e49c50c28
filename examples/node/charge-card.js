// The product docs' example ("Chaining jobs"), as written there; only the import of its billing module is added.
import { billing } from './billing.js';
import { defineHandler } from '@sextant/node';

export default defineHandler('charge-card', async (job, ctx) => {
  const charge = await billing.charge(job.payload.orderId);

  await ctx.jobs.create({
    queue: 'emails',
    handler: 'send-receipt',
    payload: { orderId: job.payload.orderId, chargeId: charge.id },
    idempotencyKey: `receipt-${job.payload.orderId}`,
  });
});
