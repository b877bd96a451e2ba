/**
 * The drill's test sink: a local delivery endpoint on 127.0.0.1 that behaves
 * like an idempotent provider. POST /deliveries with an Idempotency-Key
 * executes once per key and answers {"receipt"}; the same key again returns
 * the same receipt without a second effect; GET /deliveries/<key> answers the
 * receipt or 404. It counts effects per task_id as distinct keys, and can kill
 * the worker when a request arrives, after committing it and before answering.
 */
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export interface Effect {
  key: string;
  task_id: string;
  receipt: string;
  at: string;
}

export class TestSink {
  private server: Server;
  readonly effects: Effect[] = [];
  readonly requests: { method: string; key: string | null; task_id: string | null }[] = [];
  private byKey = new Map<string, Effect>();
  /** called once when the next POST arrives (after it is committed, before the answer) */
  onNextPost: (() => void) | null = null;
  url = "";

  constructor() {
    this.server = createServer((req, res) => void this.handle(req).then(([code, body]) => {
      res.writeHead(code, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    }, () => {
      res.writeHead(500);
      res.end("{}");
    }));
  }

  private async handle(req: IncomingMessage): Promise<[number, unknown]> {
    const path = (req.url ?? "").split("?")[0]!;
    if (req.method === "GET" && path.startsWith("/deliveries/")) {
      const key = decodeURIComponent(path.slice("/deliveries/".length));
      this.requests.push({ method: "GET", key, task_id: null });
      const e = this.byKey.get(key);
      return e ? [200, { receipt: e.receipt }] : [404, { error: "unknown key" }];
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
    this.requests.push({ method: "POST", key: typeof key === "string" ? key : null, task_id: taskId });
    if (typeof key !== "string" || !key) return [400, { error: "Idempotency-Key required" }];
    if (!taskId) return [400, { error: "task_id required" }];
    let e = this.byKey.get(key);
    if (!e) {
      e = { key, task_id: taskId, receipt: `rcpt-${this.effects.length + 1}-${key.slice(-8)}`, at: new Date().toISOString() };
      this.byKey.set(key, e);
      this.effects.push(e);
    }
    const hook = this.onNextPost;
    if (hook) {
      this.onNextPost = null;
      hook();
    }
    return [200, { receipt: e.receipt }];
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
}
