/**
 * The drill's test sink: a local delivery endpoint on 127.0.0.1 that behaves
 * like an idempotent provider. POST /deliveries with an Idempotency-Key
 * executes once per key and answers {"receipt"}; the same key again returns
 * the same receipt without a second effect; GET /deliveries/<key> answers the
 * receipt or 404. It counts effects per task_id as distinct keys, and can kill
 * the worker when a request arrives, after committing it and before answering.
 *
 * For the recovery scenarios it can also: hold deliveries made before the
 * snapshot ("already delivered", seeded, beyond the provider's idempotency
 * window, so sending one again is a second effect); fail reconciliation's
 * lookups (5xx, no answer, or an answer lost after the lookup); and, like a
 * provider that checks fencing tokens, reject (409) a write whose
 * Agentbak-Generation is lower than the highest it has seen (a write without
 * one counts as generation 0 once any has been seen).
 */
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export interface Effect {
  key: string;
  /** null for a seeded delivery: the sink does not know its task */
  task_id: string | null;
  receipt: string;
  at: string;
  /** made before the snapshot (seeded), not by anything the drill ran */
  seeded: boolean;
  generation: number | null;
}

/** How reconciliation's lookups fail: 503, never answered, or looked up and the connection dropped. */
export type LookupFault = "5xx" | "timeout" | "lost_answer";

export class TestSink {
  private server: Server;
  readonly effects: Effect[] = [];
  readonly requests: { method: string; key: string | null; task_id: string | null; generation: number | null; status: number | null }[] = [];
  private byKey = new Map<string, Effect>();
  /** called once when the next POST arrives (after it is committed, before the answer) */
  onNextPost: (() => void) | null = null;
  /** while set, GET lookups fail this way */
  lookupFault: LookupFault | null = null;
  /** the highest Agentbak-Generation seen */
  highest = 0;
  url = "";

  constructor() {
    this.server = createServer((req, res) =>
      void this.handle(req).then(
        (answer) => {
          if (!answer) return; // no answer: held open, or the connection was dropped
          res.writeHead(answer[0], { "content-type": "application/json" });
          res.end(JSON.stringify(answer[1]));
        },
        () => {
          res.writeHead(500);
          res.end("{}");
        },
      ),
    );
  }

  /** A delivery the provider made before the snapshot, for `key`. */
  seed(key: string): Effect {
    const e: Effect = { key, task_id: null, receipt: `rcpt-seeded-${key.slice(-12)}`, at: "2000-01-01T00:00:00.000Z", seeded: true, generation: null };
    this.byKey.set(key, e);
    this.effects.push(e);
    return e;
  }

  /** Learns a generation, as a provider learns the restored agent's fencing token. */
  fence(generation: number): void {
    this.highest = Math.max(this.highest, generation);
  }

  private async handle(req: IncomingMessage): Promise<[number, unknown] | null> {
    const path = (req.url ?? "").split("?")[0]!;
    const header = req.headers["agentbak-generation"];
    const generation = typeof header === "string" && /^\d+$/.test(header) ? Number(header) : null;
    const log = (method: string, key: string | null, task_id: string | null, status: number | null) => this.requests.push({ method, key, task_id, generation, status });
    if (req.method === "GET" && path.startsWith("/deliveries/")) {
      const key = decodeURIComponent(path.slice("/deliveries/".length));
      if (generation !== null) this.fence(generation);
      const e = this.byKey.get(key);
      const fault = this.lookupFault;
      if (fault === "timeout") return (log("GET", key, null, null), new Promise(() => undefined));
      if (fault === "lost_answer") {
        log("GET", key, null, null);
        req.socket.destroy();
        return null;
      }
      const answer: [number, unknown] = fault === "5xx" ? [503, { error: "unavailable" }] : e ? [200, { receipt: e.receipt }] : [404, { error: "unknown key" }];
      log("GET", key, null, answer[0]);
      return answer;
    }
    if (req.method !== "POST" || path !== "/deliveries") return [404, { error: "not found" }];
    let raw = "";
    for await (const c of req) {
      raw += c;
      if (raw.length > 1 << 20) return [413, { error: "too large" }];
    }
    const key = req.headers["idempotency-key"];
    let body: { task_id?: unknown };
    try {
      body = JSON.parse(raw);
    } catch {
      return [400, { error: "body is not JSON" }];
    }
    const taskId = typeof body.task_id === "string" ? body.task_id : null;
    const k = typeof key === "string" ? key : null;
    const answer = (code: number, b: unknown): [number, unknown] => (log("POST", k, taskId, code), [code, b]);
    if (!k) return answer(400, { error: "Idempotency-Key required" });
    if (!taskId) return answer(400, { error: "task_id required" });
    if (this.highest > 0 && (generation ?? 0) < this.highest) return answer(409, { error: `generation ${generation ?? "(none)"} is lower than ${this.highest}: superseded` });
    if (generation !== null) this.fence(generation);
    let e = this.byKey.get(k);
    if (!e || e.seeded) {
      // a seeded key is beyond the idempotency window: sending it again is a second effect
      e = { key: k, task_id: taskId, receipt: `rcpt-${this.effects.length + 1}-${k.slice(-8)}`, at: new Date().toISOString(), seeded: false, generation };
      this.byKey.set(k, e);
      this.effects.push(e);
    }
    const hook = this.onNextPost;
    if (hook) {
      this.onNextPost = null;
      hook();
    }
    return answer(200, { receipt: e.receipt });
  }

  /** Starts listening on 127.0.0.1 on a free port. */
  async start(): Promise<string> {
    await new Promise<void>((res) => this.server.listen(0, "127.0.0.1", res));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/deliveries`;
    return this.url;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((res) => this.server.close(() => res()));
  }

  /** Effects (distinct keys) executed for a task. */
  effectsFor(taskId: string): Effect[] {
    return this.effects.filter((e) => e.task_id === taskId);
  }

  /** Effects the drill caused for a key (seeded ones left out). */
  newEffectsFor(key: string): Effect[] {
    return this.effects.filter((e) => e.key === key && !e.seeded);
  }
}
