/**
 * An S3-compatible bucket as an object store. Uploads stream in 8 MiB parts
 * (a failed one is aborted, so no partial object appears); transient errors
 * are retried with bounded backoff; errors name bucket and operation, never
 * credentials.
 */
import { createReadStream, createWriteStream, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { AgentbakError, Exit, notFound, UnreachableError, usageError } from "../errors.js";
import { pidDir, sweepDead } from "../fsutil.js";
import { loadOptional } from "../optional.js";
import { scanListPage, type ListPage } from "./s3-list.js";
import { checkKey, type ObjectStore, type UploadOptions } from "./store.js";

/** Parses `s3://bucket/prefix`. */
export function parseS3Url(url: string): { bucket: string; prefix: string } {
  const m = url.match(/^s3:\/\/([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:\/(.*))?$/);
  if (!m) throw usageError(`invalid S3 repository URL ${url} (expected s3://BUCKET/PREFIX)`);
  const prefix = (m[2] ?? "").replace(/\/+$/, "");
  return { bucket: m[1]!, prefix: prefix ? prefix + "/" : "" };
}

type S3 = typeof import("@aws-sdk/client-s3");
const require = createRequire(import.meta.url);

const CONNECT_TIMEOUT_MS = 2000;
const IDLE_TIMEOUT_MS = 10_000;
/** Errors that mean the endpoint could not be reached at all, rather than an answer from it. */
const NETWORK_CODES = new Set(["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "EPIPE", "ECONNABORTED"]);

/**
 * An S3-compatible bucket. Endpoint, region and path style come from
 * AGENTBAK_S3_ENDPOINT, AWS_REGION (default us-east-1) and
 * AGENTBAK_S3_PATH_STYLE (default on when an endpoint is set); credentials
 * from the AWS SDK's standard provider chain, never printed.
 */
export class S3Store implements ObjectStore {
  readonly inPlace = false;
  readonly bucket: string;
  readonly prefix: string;
  private sdk!: S3;
  private storage?: typeof import("@aws-sdk/lib-storage");
  private client!: import("@aws-sdk/client-s3").S3Client;

  /** @param opts.endpoint another endpoint than AGENTBAK_S3_ENDPOINT's (a drill's fault proxy in front of it) */
  constructor(
    readonly url: string,
    private readonly opts: { endpoint?: string } = {},
  ) {
    const p = parseS3Url(url);
    this.bucket = p.bucket;
    this.prefix = p.prefix;
  }

  /**
   * Loads the SDK and makes the client (lazily: local repositories never load it).
   * @throws AgentbakError(2) naming the install command when the SDK, an optional dependency, is not installed.
   */
  async init(): Promise<this> {
    process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";
    // both SDK packages found now, so a missing one stops the command before it writes anything; lib-storage (the
    // multipart upload, ~0.1 s of CPU and 5 MiB to load) is loaded by the first upload: a listing never needs it
    // required, not imported: both are CommonJS, and import() lexes client-s3's 268 KB for its exports first (~0.06 s of CPU)
    this.sdk = await loadOptional("an S3 repository", ["@aws-sdk/client-s3", "@aws-sdk/lib-storage"], async () => (require.resolve("@aws-sdk/lib-storage"), require("@aws-sdk/client-s3") as S3));
    const endpoint = this.opts.endpoint ?? process.env.AGENTBAK_S3_ENDPOINT;
    this.client = new this.sdk.S3Client({
      endpoint,
      region: process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION ?? "us-east-1",
      forcePathStyle: process.env.AGENTBAK_S3_PATH_STYLE ? process.env.AGENTBAK_S3_PATH_STYLE !== "0" : Boolean(endpoint),
      requestChecksumCalculation: "WHEN_REQUIRED",
      responseChecksumValidation: "WHEN_REQUIRED",
      maxAttempts: 6, // bounded exponential backoff on 5xx, timeouts and resets
      // bounded waits for an endpoint that is down: refused, the 6 attempts end after about 2-3 s;
      // connections that are never answered, after about 6 x 2 s; a gateway that accepts and then
      // says nothing, after about 6 x 10 s (each attempt ends after 10 s without a byte)
      requestHandler: { connectionTimeout: CONNECT_TIMEOUT_MS, socketTimeout: IDLE_TIMEOUT_MS },
    });
    return this;
  }

  private k(key: string): string {
    const bare = key.replace(/\/$/, ""); // a listing prefix may end with "/"
    if (bare) checkKey(bare);
    return this.prefix + key;
  }

  /** Maps SDK errors to exit codes; names bucket and operation, never credentials. */
  private fail(op: string, key: string, e: unknown): AgentbakError {
    if (e instanceof AgentbakError) return e; // said already (nextPage, a changed object, a read cut short)
    const err = e as { name?: string; $metadata?: { httpStatusCode?: number }; code?: string; message?: string };
    const status = err.$metadata?.httpStatusCode;
    const where = `s3://${this.bucket}/${this.k(key)}`;
    if (err.name === "NoSuchBucket") return new AgentbakError(Exit.notFound, `${op} ${where}: bucket ${this.bucket} does not exist`);
    if (status === 403) return new AgentbakError(Exit.failure, `${op} ${where}: access denied (403) for bucket ${this.bucket}`);
    if (status === 404 || err.name === "NoSuchKey" || err.name === "NotFound") return new AgentbakError(Exit.notFound, `${op} ${where}: not found`);
    if ((status === undefined && (NETWORK_CODES.has(err.code ?? "") || err.name === "TimeoutError")) || status === 502 || status === 503 || status === 504)
      return new UnreachableError(`${op} ${where}: repository unreachable (${status ? `HTTP ${status}` : err.code ?? err.name}) after retries`, { cause: e });
    return new AgentbakError(Exit.failure, `${op} ${where}: ${err.name ?? "error"}${status ? ` (HTTP ${status})` : ""}${err.code ? ` ${err.code}` : ""}: ${err.message ?? ""}`.trim());
  }

  async put(key: string, body: Buffer | string, opts: { ifNoneMatch?: boolean } = {}): Promise<boolean> {
    try {
      await this.client.send(new this.sdk.PutObjectCommand({ Bucket: this.bucket, Key: this.k(key), Body: body, ...(opts.ifNoneMatch ? { IfNoneMatch: "*" } : {}) }));
      return true;
    } catch (e) {
      const status = (e as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
      if (opts.ifNoneMatch && (status === 412 || status === 409)) return false;
      throw this.fail("put", key, e);
    }
  }

  async upload(key: string, file: string, opts: UploadOptions = {}): Promise<void> {
    this.storage ??= require("@aws-sdk/lib-storage") as typeof import("@aws-sdk/lib-storage");
    const up = new this.storage.Upload({
      client: this.client,
      params: {
        Bucket: this.bucket,
        Key: this.k(key),
        Body: createReadStream(file, { highWaterMark: 1 << 20 }),
        ...(opts.retainUntil ? { ObjectLockMode: opts.lockMode ?? "GOVERNANCE", ObjectLockRetainUntilDate: opts.retainUntil } : {}),
      },
      partSize: 8 * 1024 * 1024,
      queueSize: 2,
      leavePartsOnError: false, // failed multipart uploads are aborted
    });
    try {
      await up.done();
    } catch (e) {
      throw this.fail("upload", key, e);
    }
  }

  /** One GET of the object, from byte `from` (to `end` inclusive) when given, only while its ETag is `etag` when given. */
  private open(key: string, from?: number, end?: number, etag?: string) {
    const range = from === undefined ? {} : { Range: `bytes=${from}-${end ?? ""}` };
    return this.client.send(new this.sdk.GetObjectCommand({ Bucket: this.bucket, Key: this.k(key), ...range, ...(etag ? { IfMatch: etag } : {}) }));
  }

  /** The object's bytes (from `start` to `end` inclusive when given), streamed; null when it is missing. */
  private async getStream(key: string, start?: number, end?: number): Promise<AsyncIterable<Buffer> | null> {
    try {
      return this.resumed(key, await this.open(key, start, end), start ?? 0, end);
    } catch (e) {
      const err = this.fail("get", key, e);
      if (err.code === Exit.notFound && !/bucket/.test(err.message)) return null;
      throw err;
    }
  }

  /**
   * The body of `first` (the answer for bytes `start`..`end`), read on where it broke off (a reset, a timeout, an end
   * before its Content-Length) with `Range: bytes=<next>-` and `If-Match` the first answer's ETag, so a replaced
   * object's bytes are never stitched onto the old one's: at most MAX_ATTEMPTS reads, with the client's backoff between.
   * @throws AgentbakError(13) when the object changed between two reads; UnreachableError when the reads ran out.
   */
  private async *resumed(key: string, first: { Body?: unknown; ETag?: string; ContentLength?: number }, start: number, end?: number): AsyncGenerator<Buffer> {
    const etag = first.ETag;
    const stop = first.ContentLength === undefined ? Infinity : start + first.ContentLength; // one past the last byte wanted
    const retry = (await this.client.config.retryStrategy()) as import("@smithy/types").RetryStrategyV2;
    let token = await retry.acquireInitialRetryToken("get");
    let body = first.Body as AsyncIterable<Buffer>;
    let at = start;
    for (;;) {
      try {
        for await (const c of body) {
          at += c.length;
          yield c;
        }
        if (at >= stop || stop === Infinity) return;
        throw Object.assign(new Error(`premature end of the body after ${at - start} of ${stop - start} bytes`), { code: "ECONNRESET" });
      } catch (e) {
        token = await retry.refreshRetryTokenForRetry(token, { errorType: "TRANSIENT" }).catch(() => {
          throw this.fail("get", key, e);
        });
      }
      const changed = (how: string) => new AgentbakError(Exit.verify, `get s3://${this.bucket}/${this.k(key)}: the object changed while it was read (${how}); nothing was stitched, run the command again`);
      try {
        const r = await this.open(key, at, end, etag);
        if (etag && r.ETag !== etag) throw changed(`ETag ${r.ETag} after ${etag}`);
        if (!r.ContentRange?.startsWith(`bytes ${at}-`)) throw changed(`asked for bytes ${at}-, answered ${r.ContentRange ?? "the whole object"}`);
        body = r.Body as AsyncIterable<Buffer>;
      } catch (e) {
        if ((e as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode === 412) throw changed("HTTP 412 on If-Match");
        throw this.fail("get", key, e);
      }
    }
  }

  private async readAll(key: string, s: AsyncIterable<Buffer>): Promise<Buffer> {
    const parts: Buffer[] = [];
    try {
      for await (const c of s) parts.push(c);
    } catch (e) {
      throw this.fail("get", key, e);
    }
    return Buffer.concat(parts);
  }

  async get(key: string): Promise<Buffer | null> {
    const s = await this.getStream(key);
    return s && this.readAll(key, s);
  }

  async getRange(key: string, start: number, end: number): Promise<Buffer> {
    const s = await this.getStream(key, start, end);
    if (!s) throw notFound(`object s3://${this.bucket}/${this.k(key)} not found`);
    return this.readAll(key, s);
  }

  async download(key: string, file: string): Promise<void> {
    const s = await this.getStream(key);
    if (!s) throw notFound(`object s3://${this.bucket}/${this.k(key)} not found`);
    try {
      await pipeline(s, createWriteStream(file, { flags: "wx" }));
    } catch (e) {
      rmSync(file, { force: true });
      throw this.fail("download", key, e);
    }
  }

  async head(key: string): Promise<{ size: number; mtimeMs: number; etag: string } | null> {
    try {
      const r = await this.client.send(new this.sdk.HeadObjectCommand({ Bucket: this.bucket, Key: this.k(key) }));
      return { size: Number(r.ContentLength ?? 0), mtimeMs: r.LastModified?.getTime() ?? 0, etag: `${r.ETag ?? ""}:${r.VersionId ?? ""}` };
    } catch (e) {
      const err = this.fail("head", key, e);
      if (err.code === Exit.notFound && !/bucket/.test(err.message)) return null;
      throw err;
    }
  }

  async list(prefix: string): Promise<string[]> {
    return [...(await this.tagged(prefix)).keys()];
  }

  async tagged(prefix: string): Promise<Map<string, { tag: string; size: number }>> {
    const out: [string, { tag: string; size: number }][] = [];
    const seen = new Set<string>();
    let token: string | undefined;
    do {
      const r = await this.listPage(prefix, token);
      // the time too: the same bytes put back (an ETag is their MD5) are another write
      for (const o of r.objects) out.push([o.key.slice(this.prefix.length), { tag: `${o.etag}:${o.lastModified}`, size: o.size }]);
      token = this.nextPage(seen, r.truncated, r.next, prefix);
    } while (token);
    return new Map(out.sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0)));
  }

  /**
   * One ListObjectsV2 page, sent, signed and retried by the client as any request, its body read by scanListPage
   * and not by the SDK's deserializer (which then reads an empty body; an error answer it reads as before).
   * @throws AgentbakError as `fail` maps the client's errors; AgentbakError(1) for a page that is not readable XML
   */
  private async listPage(prefix: string, token: string | undefined, delimiter?: string): Promise<ListPage> {
    const cmd = new this.sdk.ListObjectsV2Command({ Bucket: this.bucket, Prefix: this.k(prefix), ContinuationToken: token, MaxKeys: 1000, ...(delimiter ? { Delimiter: delimiter } : {}) });
    let page: ListPage | undefined;
    cmd.middlewareStack.add(
      (next) => async (args) => {
        const out = await next(args);
        const res = out.response as { statusCode?: number; body?: AsyncIterable<Buffer> | Uint8Array };
        if (res.statusCode !== undefined && res.statusCode >= 200 && res.statusCode < 300 && res.body) {
          const parts: Buffer[] = [];
          for await (const c of res.body as AsyncIterable<Buffer>) parts.push(c);
          page = scanListPage(Buffer.concat(parts).toString("utf8"));
          res.body = new Uint8Array(0);
        }
        return out;
      },
      { step: "deserialize", priority: "low", name: "agentbakListPage" },
    );
    try {
      await this.client.send(cmd);
    } catch (e) {
      throw this.fail("list", prefix, e);
    }
    if (!page) throw new AgentbakError(Exit.failure, `list s3://${this.bucket}/${this.k(prefix)}: the store answered without a listing`);
    return page;
  }

  /**
   * The next page's token of a listing, undefined after the last page. A gateway that says a listing goes on
   * without saying where, or hands out a token it gave before, would have it end early (keys missed, taken as
   * gone) or never (requests and memory without bound): the listing is refused instead.
   * @throws AgentbakError(1) naming the store's answer
   */
  private nextPage(seen: Set<string>, truncated: boolean | undefined, token: string | undefined, prefix: string): string | undefined {
    if (!truncated) return undefined;
    const where = `s3://${this.bucket}/${this.k(prefix)}`;
    if (!token) throw new AgentbakError(Exit.failure, `list ${where}: the store says the listing goes on but gives no continuation token; refusing a listing that may miss keys`);
    if (seen.has(token)) throw new AgentbakError(Exit.failure, `list ${where}: the store handed out a continuation token it gave before (a listing that never ends); refusing it`);
    seen.add(token);
    return token;
  }

  /** Every key of a bucket names an object. */
  async strays(_prefix: string): Promise<string[]> {
    return [];
  }

  async hidden(prefix: string): Promise<Map<string, Buffer>> {
    const marked = new Set<string>();
    const kept = new Map<string, { id: string; at: number }>();
    const seen = new Set<string>();
    let next: { KeyMarker?: string; VersionIdMarker?: string } = {};
    try {
      for (;;) {
        const r = await this.client.send(new this.sdk.ListObjectVersionsCommand({ Bucket: this.bucket, Prefix: this.k(prefix), ...next }));
        for (const m of r.DeleteMarkers ?? []) if (m.IsLatest && m.Key) marked.add(m.Key);
        for (const v of r.Versions ?? []) {
          const at = v.LastModified?.getTime() ?? 0;
          if (v.Key && v.VersionId && at >= (kept.get(v.Key)?.at ?? -1)) kept.set(v.Key, { id: v.VersionId, at });
        }
        next = { KeyMarker: r.NextKeyMarker, VersionIdMarker: r.NextVersionIdMarker };
        if (!this.nextPage(seen, r.IsTruncated, next.KeyMarker === undefined ? undefined : JSON.stringify(next), prefix)) break;
      }
    } catch (e) {
      throw this.fail("list versions", prefix, e);
    }
    const out = new Map<string, Buffer>();
    for (const key of [...marked].filter((k) => kept.has(k)).sort()) {
      try {
        const r = await this.client.send(new this.sdk.GetObjectCommand({ Bucket: this.bucket, Key: key, VersionId: kept.get(key)!.id }));
        out.set(key.slice(this.prefix.length), Buffer.from(await r.Body!.transformToByteArray()));
      } catch (e) {
        throw this.fail("get a kept version of", key.slice(this.prefix.length), e);
      }
    }
    return out;
  }

  async folders(prefix: string): Promise<string[]> {
    const out: string[] = [];
    const seen = new Set<string>();
    let token: string | undefined;
    do {
      const r = await this.listPage(prefix, token, "/");
      for (const p of r.prefixes) out.push(p.slice(this.k(prefix).length).replace(/\/$/, ""));
      token = this.nextPage(seen, r.truncated, r.next, prefix);
    } while (token);
    return out.sort();
  }

  async append(key: string, line: string): Promise<void> {
    // objects can not be appended to: read and rewrite (callers serialise appends with a lock)
    const cur = await this.get(key);
    await this.put(key, cur ? Buffer.concat([cur, Buffer.from(line)]) : line);
  }

  async localPath(key: string, tempDir: string): Promise<string> {
    const file = join(tempDir, key.split("/").at(-1)!);
    await this.download(key, file);
    return file;
  }

  tempDir(tag: string): string {
    return pidDir(tmpdir(), `agentbak-${tag}`);
  }

  async sweep(olderThanMs: number): Promise<number> {
    let n = sweepDead(tmpdir(), "agentbak-");
    try {
      const r = await this.client.send(new this.sdk.ListMultipartUploadsCommand({ Bucket: this.bucket, Prefix: this.prefix }));
      for (const u of r.Uploads ?? []) {
        if (u.Initiated && Date.now() - u.Initiated.getTime() < olderThanMs) continue;
        await this.client.send(new this.sdk.AbortMultipartUploadCommand({ Bucket: this.bucket, Key: u.Key, UploadId: u.UploadId }));
        n++;
      }
    } catch (e) {
      throw this.fail("sweep multipart uploads in", "", e);
    }
    return n;
  }

  async delete(key: string): Promise<boolean> {
    try {
      // with versioning (Object Lock), retention protects versions: delete each version explicitly
      const versions = await this.client.send(new this.sdk.ListObjectVersionsCommand({ Bucket: this.bucket, Prefix: this.k(key) }));
      const mine = (versions.Versions ?? []).filter((v) => v.Key === this.k(key));
      if (mine.length === 0) {
        await this.client.send(new this.sdk.DeleteObjectCommand({ Bucket: this.bucket, Key: this.k(key) }));
        return true;
      }
      let all = true;
      for (const v of mine) {
        try {
          await this.client.send(new this.sdk.DeleteObjectCommand({ Bucket: this.bucket, Key: this.k(key), VersionId: v.VersionId }));
        } catch (e) {
          if ((e as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode === 403) all = false;
          else throw e;
        }
      }
      return all;
    } catch (e) {
      if (e instanceof AgentbakError) throw e;
      throw this.fail("delete", key, e);
    }
  }
}
