// Runs in the browser page of the Chromium test: the client's browser build
// (fetch transport, CompressionStream) produces and consumes through a dev
// cluster on another origin, which works only because the cluster answers
// CORS (a token, when given, rides in the Authorization header CORS allows).
import { Strata } from "../../src/browser.js";

declare global {
  interface Window {
    strataTest: (gateway: string, topic: string, token?: string) => Promise<{ acks: number; consumed: string[]; error?: string }>;
  }
}

window.strataTest = async (gateway, topic, token) => {
  try {
    const strata = new Strata({ gateway, clientId: "chromium", token });
    const producer = strata.producer({ compression: "gzip" });
    const acks = await producer.send({
      topic,
      messages: Array.from({ length: 20 }, (_, i) => ({ key: `b${i}`, value: `browser ${i}`, headers: { origin: "chromium" } })),
    });
    await producer.close();
    const consumed: string[] = [];
    const consumer = strata.consumer({ groupId: "browser-group", maxWaitTimeInMs: 200 });
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ message }) => {
        if (new TextDecoder().decode(message.headers.origin as Uint8Array) === "chromium") consumed.push(new TextDecoder().decode(message.value!));
      },
    });
    const deadline = Date.now() + 60_000;
    while (consumed.length < 20 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    await consumer.disconnect();
    return { acks: acks.length, consumed };
  } catch (e) {
    return { acks: 0, consumed: [], error: String(e) + ((e as Error).stack ?? "") };
  }
};
