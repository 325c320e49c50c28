// A stand-in for a payment provider's client, so that the example runs on a laptop.
export const billing = {
  async charge(orderId) {
    return { id: `ch_${orderId}_${Date.now().toString(36)}` };
  },
};
