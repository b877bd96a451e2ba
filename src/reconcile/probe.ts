/**
 * Probes: ask the outside world, by idempotency key, what became of an open
 * operation. An HTTP request template (200 completed, 404 not found, anything
 * else unknown) or a command (JSON in, JSON out). Unknown answers are retried
 * with bounded backoff. Credential values fill headers at the moment of the
 * request and never appear in an answer, a detail or an error.
 */
import { execa } from "execa";
import { CREDENTIAL_PLACEHOLDER } from "../config/recovery.js";
import type { Config } from "../config/schema.js";

export type ProbeState = "completed" | "not_found" | "unknown";

/** What one probe attempt learned. `detail` is for people and holds no credential. */
export interface ProbeAnswer {
  state: ProbeState;
  receipt: string | null;
  detail: string;
}

export interface ProbeOutcome extends ProbeAnswer {
  attempts: number;
}

/** What a probe is asked about. */
export interface ProbeQuestion {
  id: string | number | null;
  idempotency_key: string;
  kind: string | null;
}

/** One attempt at asking about one operation; never throws. */
export type Probe = (q: ProbeQuestion) => Promise<ProbeAnswer>;

export interface ProbeOptions {
  /** the restored generation, sent as Agentbak-Generation (and AGENTBAK_GENERATION to a command) */
  generation: number;
  timeoutMs: number;
  /** a credential's value by config name; only called while a request is built */
  credential: (name: string) => string;
  /** in a drill: the test sink that stands in for the provider */
  sinkUrl?: string;
}

type ProbeConfig = NonNullable<Config["reconcile"]>["probe"];

const fill = (template: string, q: ProbeQuestion) =>
  template.replace(/\{(id|idempotency_key|kind)\}/g, (_, k: keyof ProbeQuestion) => encodeURIComponent(String(q[k] ?? "")));

/** The receipt in a provider's answer: a string, or any other JSON value as its JSON text. */
const receiptOf = (v: unknown): string | null => (v === undefined || v === null ? null : typeof v === "string" ? v : JSON.stringify(v));

/**
 * A probe for the configured template. In a drill (`sinkUrl`) an HTTP probe
 * asks `$AGENTBAK_SINK_URL/{idempotency_key}` and sends no credential, and a
 * command probe gets AGENTBAK_SINK_URL in its environment.
 */
export function makeProbe(cfg: ProbeConfig, o: ProbeOptions): Probe {
  if ("command" in cfg) return commandProbe(cfg.command, o);
  const url = o.sinkUrl ? `${o.sinkUrl}/{idempotency_key}` : cfg.http.url;
  return async (q) => {
    const headers: Record<string, string> = { accept: "application/json", "agentbak-generation": String(o.generation) };
    // the credential values this request carries: no message about it may hold one
    const secrets: string[] = [];
    try {
      for (const [h, v] of Object.entries(cfg.http.headers))
        headers[h] = v.replace(CREDENTIAL_PLACEHOLDER, (_, name: string) => {
          const value = o.sinkUrl ? "drill" : o.credential(name);
          // a value with a line break can not be a header (and fetch's error would quote it)
          if (/[\r\n\0]/.test(value)) throw new Error(`credential ${name} holds a line break or NUL: not sent in header ${h}`);
          if (!o.sinkUrl) secrets.push(value);
          return value;
        });
    } catch (e) {
      return { state: "unknown", receipt: null, detail: (e as Error).message };
    }
    const redact = (m: string) => secrets.reduce((t, x) => (x ? t.split(x).join("[credential]") : t), m);
    let res: Response;
    let text: string;
    try {
      res = await fetch(fill(url, q), { headers, redirect: "manual", signal: AbortSignal.timeout(o.timeoutMs) });
      text = await res.text();
    } catch (e) {
      const err = e as Error & { cause?: { code?: string } };
      // fetch's messages may quote a header value: only its code, else the message with every credential value cut out
      const why = err.name === "TimeoutError" || err.name === "AbortError" ? `no answer within ${o.timeoutMs / 1000}s` : `request failed (${redact(err.cause?.code ?? err.message)})`;
      return { state: "unknown", receipt: null, detail: why };
    }
    if (res.status === 404) return { state: "not_found", receipt: null, detail: "provider answered 404: no record of this key" };
    if (res.status !== 200) return { state: "unknown", receipt: null, detail: `provider answered ${res.status}` };
    let body: { receipt?: unknown } | null = null;
    try {
      body = JSON.parse(text);
    } catch {
      /* garbage */
    }
    const receipt = receiptOf(body?.receipt);
    return receipt === null ? { state: "unknown", receipt: null, detail: "provider answered 200 without a JSON receipt" } : { state: "completed", receipt, detail: "provider answered 200 with a receipt" };
  };
}

function commandProbe(command: string[], o: ProbeOptions): Probe {
  return async (q) => {
    const r = await execa(command[0]!, command.slice(1), {
      input: JSON.stringify({ id: q.id, idempotency_key: q.idempotency_key, kind: q.kind }),
      env: { AGENTBAK_GENERATION: String(o.generation), ...(o.sinkUrl ? { AGENTBAK_SINK_URL: o.sinkUrl } : {}) },
      reject: false,
      timeout: o.timeoutMs,
      maxBuffer: 1 << 20,
    });
    if (r.timedOut) return { state: "unknown", receipt: null, detail: `probe command gave no answer within ${o.timeoutMs / 1000}s` };
    if (r.exitCode !== 0) return { state: "unknown", receipt: null, detail: `probe command exited ${r.exitCode ?? r.signal}` };
    let a: { state?: unknown; receipt?: unknown } | null = null;
    try {
      a = JSON.parse(String(r.stdout));
    } catch {
      /* garbage */
    }
    const receipt = receiptOf(a?.receipt);
    if (a?.state === "completed" && receipt !== null) return { state: "completed", receipt, detail: "probe command: completed" };
    if (a?.state === "not_found") return { state: "not_found", receipt: null, detail: "probe command: not found" };
    if (a?.state === "unknown") return { state: "unknown", receipt: null, detail: "probe command: unknown" };
    return { state: "unknown", receipt: null, detail: 'probe command printed no {"state": "completed"|"not_found"|"unknown"} answer (a completed one needs a receipt)' };
  };
}

/**
 * Asks until the answer is known, at most `attempts` times, waiting 250 ms,
 * 500 ms, 1 s ... (at most 4 s) between attempts.
 */
export async function probeWithRetries(probe: Probe, q: ProbeQuestion, attempts: number): Promise<ProbeOutcome> {
  let last: ProbeAnswer = { state: "unknown", receipt: null, detail: "not asked" };
  for (let i = 0; i < attempts; i++) {
    if (i) await new Promise((r) => setTimeout(r, Math.min(250 * 2 ** (i - 1), 4000)));
    last = await probe(q);
    if (last.state !== "unknown") return { ...last, attempts: i + 1 };
  }
  return { ...last, detail: `${last.detail} (after ${attempts} attempt${attempts > 1 ? "s" : ""})`, attempts };
}
