/**
 * Probes: ask the outside world, by idempotency key, what became of an open
 * operation. An HTTP request template (200 completed, 404 not found, anything
 * else unknown) or a command (JSON in, JSON out), run contained: its own
 * process group, a scrubbed environment, killed whole at its timeout. An
 * answer over 64 KiB is not read (unknown), and only the fields the config
 * names (receiptFields) are kept as the receipt. Unknown answers are retried
 * with bounded backoff. Credential values fill headers (or a command's
 * environment) at the moment of the request and never appear in an answer,
 * a detail or an error.
 */
import { isUtf8 } from "node:buffer";
import { basicEnv, CONTAINED_MAX_BYTES, runContained } from "../contained.js";
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

/** One attempt at asking about one operation, given up after the configured timeout or `withinMs` if shorter; never throws. */
export type Probe = (q: ProbeQuestion, withinMs?: number) => Promise<ProbeAnswer>;

export interface ProbeOptions {
  /** the restored generation, sent as Agentbak-Generation (and AGENTBAK_GENERATION to a command) */
  generation: number;
  /** a credential's value by config name; only called while a request is built */
  credential: (name: string) => string;
  /** in a drill: the test sink that stands in for the provider */
  sinkUrl?: string;
}

type ReconcileConfig = NonNullable<Config["reconcile"]>;

/** The most of a provider's answer (HTTP body, or a command's stdout) a probe reads. */
export const PROBE_ANSWER_MAX_BYTES = CONTAINED_MAX_BYTES;
const TOO_LARGE = `larger than ${PROBE_ANSWER_MAX_BYTES / 1024} KiB: not read`;
/** An answer whose bytes are not UTF-8: decoded, its receipt would hold U+FFFD, not what the provider sent. */
const NOT_UTF8 = "not UTF-8: not read (a receipt decoded from it would not be the provider's)";

const unknown = (detail: string): ProbeAnswer => ({ state: "unknown", receipt: null, detail });

/**
 * The probe URL for one operation: each placeholder filled with its value percent-encoded. A value that is a dot
 * segment ("." or "..", which percent-encoding keeps and URL parsing removes with the segment before it) would
 * send the operator's credential to another endpoint of the provider: it is never sent.
 * @throws Error naming the field and value.
 */
const fill = (template: string, q: ProbeQuestion) =>
  template.replace(/\{(id|idempotency_key|kind)\}/g, (_, k: keyof ProbeQuestion) => {
    const v = encodeURIComponent(String(q[k] ?? ""));
    if (v === "." || v === "..") throw new Error(`${k} ${JSON.stringify(v)} is a dot segment of a URL path (it would ask another endpoint of the provider): not sent`);
    return v;
  });

/** The value at a dotted path of a JSON answer (own keys of objects only). */
const at = (v: unknown, path: string): unknown =>
  path.split(".").reduce<unknown>((x, k) => (x && typeof x === "object" && !Array.isArray(x) && Object.hasOwn(x, k) ? (x as Record<string, unknown>)[k] : undefined), v);

/**
 * The receipt in a provider's answer: only the fields the config names. One
 * field: its value (a string as it is, any other JSON value as its JSON
 * text); several: a JSON object of them. Null when one is missing.
 */
function receiptOf(answer: unknown, fields: string[]): string | null {
  const values = fields.map((f) => at(answer, f));
  if (values.some((v) => v === undefined || v === null)) return null;
  if (fields.length === 1) return typeof values[0] === "string" ? values[0] : JSON.stringify(values[0]);
  return JSON.stringify(Object.fromEntries(fields.map((f, i) => [f, values[i]])));
}

const parse = (text: string): unknown => {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
};

/**
 * `template` with each {credential:NAME} filled (in a drill with "drill"); each value used goes into `used`.
 * @throws Error naming the credential and `where` when a value can not go there.
 */
function withCredentials(template: string, where: string, o: ProbeOptions, used: string[]): string {
  return template.replace(CREDENTIAL_PLACEHOLDER, (_, name: string) => {
    const value = o.sinkUrl ? "drill" : o.credential(name);
    // a value with a line break can not be a header (and fetch's error would quote it), nor NUL an environment variable
    if (/[\r\n\0]/.test(value)) throw new Error(`credential ${name} holds a line break or NUL: not sent in ${where}`);
    if (!o.sinkUrl) used.push(value);
    return value;
  });
}

/**
 * A probe for the configured template. In a drill (`sinkUrl`) an HTTP probe
 * asks `$AGENTBAK_SINK_URL/{idempotency_key}` and sends no credential, and a
 * command probe gets AGENTBAK_SINK_URL in its environment.
 */
export function makeProbe(cfg: ReconcileConfig, o: ProbeOptions): Probe {
  const x = { ...o, timeoutMs: cfg.timeoutSeconds * 1000 };
  return "command" in cfg.probe ? commandProbe(cfg.probe, cfg.receiptFields, x) : httpProbe(cfg.probe.http, cfg.receiptFields, x);
}

type Attempt = ProbeOptions & { timeoutMs: number };

function httpProbe(http: { url: string; headers: Record<string, string> }, fields: string[], o: Attempt): Probe {
  const url = o.sinkUrl ? `${o.sinkUrl}/{idempotency_key}` : http.url;
  const missing = `provider answered 200 without ${fields.join(", ")} in a JSON body`;
  return async (q, withinMs) => {
    const ms = Math.min(o.timeoutMs, withinMs ?? Infinity);
    const headers: Record<string, string> = { accept: "application/json", "agentbak-generation": String(o.generation) };
    // the credential values this request carries: no message about it may hold one
    const secrets: string[] = [];
    try {
      for (const [h, v] of Object.entries(http.headers)) headers[h] = withCredentials(v, `header ${h}`, o, secrets);
    } catch (e) {
      return unknown((e as Error).message);
    }
    const redact = (m: string) => secrets.reduce((t, x) => (x ? t.split(x).join("[credential]") : t), m);
    let res: Response;
    let body: Buffer | null;
    let target: string;
    try {
      target = fill(url, q);
    } catch (e) {
      return unknown((e as Error).message);
    }
    try {
      res = await fetch(target, { headers, redirect: "manual", signal: AbortSignal.timeout(ms) });
      if (res.status !== 200) await res.body?.cancel();
      body = res.status === 200 ? await readCapped(res) : Buffer.alloc(0);
    } catch (e) {
      const err = e as Error & { cause?: { code?: string } };
      // fetch's messages may quote a header value: only its code, else the message with every credential value cut out
      const why = err.name === "TimeoutError" || err.name === "AbortError" ? `no answer within ${Math.round(ms / 100) / 10}s` : `request failed (${redact(err.cause?.code ?? err.message)})`;
      return unknown(why);
    }
    if (res.status === 404) return { state: "not_found", receipt: null, detail: "provider answered 404: no record of this key" };
    if (res.status !== 200) return unknown(`provider answered ${res.status}`);
    if (body === null) return unknown(`provider's answer is ${TOO_LARGE}`);
    if (!isUtf8(body)) return unknown(`provider's answer is ${NOT_UTF8}`);
    const receipt = receiptOf(parse(body.toString("utf8")), fields);
    return receipt === null ? unknown(missing) : { state: "completed", receipt, detail: "provider answered 200 with a receipt" };
  };
}

/** A response body, or null when it is over PROBE_ANSWER_MAX_BYTES (the rest is not read). */
async function readCapped(res: Response): Promise<Buffer | null> {
  if (Number(res.headers.get("content-length") ?? 0) > PROBE_ANSWER_MAX_BYTES) {
    await res.body?.cancel();
    return null;
  }
  const chunks: Uint8Array[] = [];
  let n = 0;
  for await (const c of res.body ?? []) {
    n += c.length;
    if (n > PROBE_ANSWER_MAX_BYTES) return null; // leaving the loop cancels the stream
    chunks.push(c);
  }
  return Buffer.concat(chunks);
}

function commandProbe(probe: { command: string[]; env: Record<string, string> }, fields: string[], o: Attempt): Probe {
  return async (q, withinMs) => {
    const ms = Math.min(o.timeoutMs, withinMs ?? Infinity);
    let env: Record<string, string>;
    try {
      const extra = Object.fromEntries(Object.entries(probe.env).map(([k, v]) => [k, withCredentials(v, `env ${k}`, o, [])]));
      env = { ...basicEnv(), ...extra, AGENTBAK_GENERATION: String(o.generation), ...(o.sinkUrl ? { AGENTBAK_SINK_URL: o.sinkUrl } : {}) };
    } catch (e) {
      return unknown((e as Error).message);
    }
    const r = await runContained(probe.command, { input: JSON.stringify({ id: q.id, idempotency_key: q.idempotency_key, kind: q.kind }), env, timeoutMs: ms, maxBytes: PROBE_ANSWER_MAX_BYTES });
    if (r.timedOut) return unknown(`probe command gave no answer within ${Math.round(ms / 100) / 10}s (its process group was killed)`);
    if (r.tooLarge) return unknown(`probe command's answer is ${TOO_LARGE}`);
    if (r.startError) return unknown(`probe command could not start (${r.startError})`);
    if (r.exitCode !== 0) return unknown(`probe command exited ${r.exitCode ?? r.signal}`);
    if (r.notUtf8) return unknown(`probe command's answer is ${NOT_UTF8}`);
    const a = parse(r.stdout) as { state?: unknown } | null;
    const receipt = receiptOf(a, fields);
    if (a?.state === "completed" && receipt !== null) return { state: "completed", receipt, detail: "probe command: completed" };
    if (a?.state === "not_found") return { state: "not_found", receipt: null, detail: "probe command: not found" };
    if (a?.state === "unknown") return unknown("probe command: unknown");
    return unknown(`probe command printed no {"state": "completed"|"not_found"|"unknown"} answer (a completed one needs ${fields.join(", ")})`);
  };
}

/**
 * Asks until the answer is known, at most `attempts` times, waiting 250 ms,
 * 500 ms, 1 s ... (at most 4 s) between attempts, never past `deadline` (ms
 * since the epoch: the whole reconcile's time, shared by its operations): an
 * attempt is cut to the time left, and none starts once it is gone.
 */
export async function probeWithRetries(probe: Probe, q: ProbeQuestion, attempts: number, deadline = Infinity): Promise<ProbeOutcome> {
  let last: ProbeAnswer = { state: "unknown", receipt: null, detail: "not asked" };
  for (let i = 0; i < attempts; i++) {
    if (i) await new Promise((r) => setTimeout(r, Math.max(0, Math.min(250 * 2 ** (i - 1), 4000, deadline - Date.now()))));
    const left = deadline - Date.now();
    if (left <= 0) return { ...last, detail: `${i ? `${last.detail}; not asked again` : "not asked"}: reconcile's time (timeout × attempts) ran out`, attempts: i };
    last = await probe(q, left);
    if (last.state !== "unknown") return { ...last, attempts: i + 1 };
  }
  return { ...last, detail: `${last.detail} (after ${attempts} attempt${attempts > 1 ? "s" : ""})`, attempts };
}
