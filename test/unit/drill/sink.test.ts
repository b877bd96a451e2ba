// The drill's test sink, over real HTTP: one effect per Idempotency-Key, seeded deliveries outside the idempotency window, lookup faults, and fencing by Agentbak-Generation.
import { afterEach, describe, expect, it } from "vitest";
import { TestSink } from "../../../src/drill/sink.js";

let sink: TestSink;
afterEach(async () => sink?.stop());
const start = async () => {
  sink = new TestSink();
  return sink.start();
};
const post = (url: string, key: string | null, body: unknown, generation?: number) =>
  fetch(url, { method: "POST", headers: { ...(key ? { "idempotency-key": key } : {}), ...(generation !== undefined ? { "agentbak-generation": String(generation) } : {}) }, body: typeof body === "string" ? body : JSON.stringify(body) }).then(async (r) => [r.status, await r.json()] as const);
const get = (url: string, key: string) => fetch(`${url}/${encodeURIComponent(key)}`).then(async (r) => [r.status, await r.json()] as const);

describe("TestSink", () => {
  it("listens on 127.0.0.1 and executes once per key: the same key again answers the same receipt without a second effect", async () => {
    const url = await start();
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/deliveries$/);
    const [s1, a1] = await post(url, "k-1", { task_id: "t1" });
    const [s2, a2] = await post(url, "k-1", { task_id: "t1" });
    expect([s1, s2]).toEqual([200, 200]);
    expect(a2).toEqual(a1);
    await post(url, "k-2", { task_id: "t1" });
    expect(sink.effectsFor("t1").map((e) => e.key)).toEqual(["k-1", "k-2"]);
    expect(sink.effectsFor("t2")).toEqual([]);
    expect(await get(url, "k-1")).toEqual([200, a1]);
    expect(await get(url, "never")).toEqual([404, { error: "unknown key" }]);
  });

  it("refuses a delivery without a key, a task_id or a JSON body (400) and makes no effect", async () => {
    const url = await start();
    expect((await post(url, null, { task_id: "t" }))[0]).toBe(400);
    expect((await post(url, "k", {}))[0]).toBe(400);
    expect((await post(url, "k", "{not json"))[0]).toBe(400);
    expect(sink.effects).toEqual([]);
    expect((await fetch(url.replace("/deliveries", "/other"))).status).toBe(404);
  });

  it("a seeded delivery answers lookups, and sending its key again is a second, new effect", async () => {
    const url = await start();
    const e = sink.seed("op-000000000042");
    expect(await get(url, "op-000000000042")).toEqual([200, { receipt: e.receipt }]);
    expect(sink.newEffectsFor("op-000000000042")).toEqual([]);
    const [, a] = await post(url, "op-000000000042", { task_id: "t" });
    expect(a.receipt).not.toBe(e.receipt);
    expect(sink.newEffectsFor("op-000000000042")).toHaveLength(1);
  });

  it("calls onNextPost once, after committing the delivery and before answering", async () => {
    const url = await start();
    const seen: number[] = [];
    sink.onNextPost = () => seen.push(sink.effects.length);
    await post(url, "a", { task_id: "t" });
    await post(url, "b", { task_id: "t" });
    expect(seen).toEqual([1]);
  });

  it("lookup faults: 503, an answer dropped, or none at all", async () => {
    const url = await start();
    sink.seed("k");
    sink.lookupFault = "5xx";
    expect((await get(url, "k"))[0]).toBe(503);
    sink.lookupFault = "lost_answer";
    await expect(get(url, "k")).rejects.toThrow();
    sink.lookupFault = "timeout";
    await expect(fetch(`${url}/k`, { signal: AbortSignal.timeout(300) })).rejects.toThrow();
    expect(sink.requests.map((r) => [r.method, r.key, r.status])).toEqual([["GET", "k", 503], ["GET", "k", null], ["GET", "k", null]]);
  });

  it("fences: once a generation is known, a lower one (or none) is rejected with 409 and makes no effect; lookups teach it too", async () => {
    const url = await start();
    expect((await post(url, "a", { task_id: "t" }))[0]).toBe(200);
    await fetch(`${url}/a`, { headers: { "agentbak-generation": "2" } });
    expect(sink.highest).toBe(2);
    expect((await post(url, "b", { task_id: "t" }, 1))[0]).toBe(409);
    expect((await post(url, "c", { task_id: "t" }))[0]).toBe(409);
    expect((await post(url, "d", { task_id: "t" }, 2))[0]).toBe(200);
    expect((await post(url, "e", { task_id: "t" }, 3))[0]).toBe(200);
    expect((await post(url, "f", { task_id: "t" }, 2))[0]).toBe(409);
    expect(sink.effectsFor("t").map((e) => [e.key, e.generation])).toEqual([["a", null], ["d", 2], ["e", 3]]);
    expect(sink.requests.filter((r) => r.status === 409).map((r) => r.generation)).toEqual([1, null, 2]);
  });
});
