// The job charge-card chains: it runs on the same worker (or any worker that serves it).
import { defineHandler, NonRetryableError } from '@sextant/node';

export default defineHandler('send-receipt', async (job, ctx) => {
  const { orderId, chargeId } = job.payload;
  if (!chargeId) throw new NonRetryableError(`order ${orderId} has no charge`);
  console.log(`receipt for order ${orderId} (charge ${chargeId}) sent by ${job.id}, attempt ${job.attempt}`);
});
