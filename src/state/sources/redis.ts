/**
 * Redis as a state source: the keys matching the configured patterns, each
 * with its type, value (DUMP) and remaining TTL, read by one server-side
 * script (one point in time); restored with RESTORE, each TTL reduced by the
 * time since the snapshot, keys that would already have expired skipped and
 * listed.
 */
import { createReadStream, createWriteStream } from "node:fs";
import { once } from "node:events";
import { join } from "node:path";
import { createInterface } from "node:readline";
// type only: the client is loaded when a Redis source is used (a backup without one never pays for it)
import type { Redis } from "ioredis";
import { AgentbakError, Exit, verifyError } from "../../errors.js";
import { freePort, serverCommand, serverDir, sourceError, startServer, stopServer, type SourceDriver } from "./common.js";

/** Reads every matching key with its type, remaining TTL and DUMP in one script run: nothing changes in between. */
const CAPTURE = `
local seen, out = {}, {}
for _, pat in ipairs(ARGV) do
  for _, k in ipairs(redis.call('KEYS', pat)) do
    if not seen[k] then
      seen[k] = true
      local d = redis.call('DUMP', k)
      if d then
        out[#out + 1] = k
        out[#out + 1] = redis.call('TYPE', k)['ok']
        out[#out + 1] = redis.call('PTTL', k)
        out[#out + 1] = d
      end
    end
  end
end
return out`;

/** One captured key, as a line of the dump file (binary fields base64). */
interface KeyLine {
  k: string;
  t: string;
  /** remaining TTL in ms at the snapshot, -1 for none */
  ttl: number;
  v: string;
}

const connect = async (url: string): Promise<Redis> => {
  const { Redis } = await import("ioredis");
  return new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => null, connectTimeout: 10_000 });
};

async function withClient<T>(url: string, fn: (r: Redis) => Promise<T>): Promise<T> {
  const r = await connect(url);
  let cause: Error | null = null;
  r.on("error", (e: Error) => (cause = e)); // surfaced by the command that fails
  try {
    // a connection that failed rejects as "Connection is closed."; the error event said why (ECONNREFUSED, ENOTFOUND, ...)
    await r.connect().catch((e: unknown) => Promise.reject(cause ?? e));
    return await fn(r);
  } finally {
    r.disconnect();
  }
}

/** A key as people read it: the text when it is printable, else `base64:...`. */
const display = (k: Buffer) => (/^[\x20-\x7e]*$/.test(k.toString("latin1")) ? k.toString("latin1") : `base64:${k.toString("base64")}`);

async function* readKeys(file: string): AsyncGenerator<KeyLine> {
  const lines = createInterface({ input: createReadStream(file), crlfDelay: Infinity });
  let first = true;
  for await (const line of lines) {
    if (first) {
      first = false;
      if (!line.startsWith('{"format":"agentbak-redis"')) throw verifyError("not an agentbak redis dump");
      continue;
    }
    if (line) yield JSON.parse(line) as KeyLine;
  }
}

const countTypes = (types: string[]) => types.reduce<Record<string, number>>((o, t) => ((o[t] = (o[t] ?? 0) + 1), o), {});

async function inBatches<T>(items: AsyncIterable<T>, n: number, fn: (batch: T[]) => Promise<void>): Promise<void> {
  let batch: T[] = [];
  for await (const x of items) {
    batch.push(x);
    if (batch.length >= n) await fn(batch.splice(0));
  }
  if (batch.length) await fn(batch);
}

/** Throws the first error a pipeline answered with. */
function pipelineOk(res: [Error | null, unknown][] | null): void {
  const e = res?.find(([err]) => err)?.[0];
  if (e) throw e;
}

export const redisDriver: SourceDriver = {
  async capture(spec, url, dir) {
    const file = join(dir, `${spec.name}.redis.jsonl`);
    try {
      return await withClient(url, async (r) => {
        const version = /redis_version:(\S+)/.exec(await r.info("server"))?.[1] ?? null;
        // taken before the script runs: TTLs rebased from here err on the short side, never extend a lease
        const at = new Date();
        const flat = (await r.callBuffer("EVAL", CAPTURE, 0, ...(spec.patterns ?? ["*"]))) as (Buffer | number)[];
        const out = createWriteStream(file, { flags: "wx", mode: 0o600 });
        const types: string[] = [];
        const write = async (s: string) => {
          if (!out.write(s + "\n")) await once(out, "drain");
        };
        await write(JSON.stringify({ format: "agentbak-redis", version: 1, keys: flat.length / 4, redis_version: version }));
        for (let i = 0; i < flat.length; i += 4) {
          const t = String(flat[i + 1]);
          types.push(t);
          await write(JSON.stringify({ k: (flat[i] as Buffer).toString("base64"), t, ttl: Number(flat[i + 2]), v: (flat[i + 3] as Buffer).toString("base64") } satisfies KeyLine));
        }
        out.end();
        await once(out, "finish");
        return { snapshotAt: at, serverVersion: version, files: [{ path: `sources/${spec.name}/keys.jsonl`, file, records: countTypes(types) }] };
      });
    } catch (e) {
      throw sourceError(spec.name, e, url);
    }
  },

  async check(name, files) {
    const f = files[0]!;
    const types: string[] = [];
    try {
      for await (const k of readKeys(f.file)) types.push(k.t);
    } catch (e) {
      throw verifyError(`source ${name}: ${(e as Error).message}`);
    }
    const counts = countTypes(types);
    for (const t of Object.keys({ ...f.records, ...counts }))
      if ((counts[t] ?? 0) !== (f.records[t] ?? 0)) throw verifyError(`source ${name}: the dump holds ${counts[t] ?? 0} ${t} keys, manifest says ${f.records[t] ?? 0}`);
    return `${types.length} keys with type, TTL and value`;
  },

  async occupant(url, files, allowNonEmpty) {
    return withClient(url, async (r) => {
      const n = await r.dbsize();
      if (n === 0) return null;
      if (!allowNonEmpty) return `the keyspace holds ${n} keys`;
      let clash: string | null = null;
      await inBatches(readKeys(files[0]!.file), 500, async (b) => {
        if (clash) return;
        const res = await b.reduce((p, k) => p.exists(Buffer.from(k.k, "base64")), r.pipeline()).exec();
        const i = res?.findIndex(([, v]) => v === 1) ?? -1;
        if (i >= 0) clash = `key ${display(Buffer.from(b[i]!.k, "base64"))} already exists`;
      });
      return clash;
    });
  },

  async restore(name, files, url, elapsedMs) {
    const elapsed = Math.max(0, elapsedMs);
    const skipped: string[] = [];
    const written: { key: Buffer; type: string }[] = [];
    try {
      return await withClient(url, async (r) => {
        try {
          await inBatches(readKeys(files[0]!.file), 500, async (b) => {
            const p = r.pipeline();
            for (const k of b) {
              const key = Buffer.from(k.k, "base64");
              const left = k.ttl < 0 ? 0 : k.ttl - elapsed;
              if (k.ttl >= 0 && left <= 0) {
                skipped.push(display(key));
                continue;
              }
              p.restore(key, left, Buffer.from(k.v, "base64"));
              written.push({ key, type: k.t });
            }
            pipelineOk(await p.exec());
          });
          const present = written.length ? await r.exists(...written.map((w) => w.key)) : 0;
          if (present !== written.length) throw new AgentbakError(Exit.verify, `${written.length} keys written, ${present} present after the restore`);
        } catch (e) {
          // the target held none of these keys before: take back what was written
          for (let i = 0; i < written.length; i += 500) await r.del(...written.slice(i, i + 500).map((w) => w.key)).catch(() => undefined);
          throw e;
        }
        const detail = `${written.length} keys restored with TTLs reduced by ${(elapsed / 1000).toFixed(1)} s` + (skipped.length ? `; ${skipped.length} expired since the snapshot, skipped` : "");
        return { records: countTypes(written.map((w) => w.type)), skipped, dimensions: {}, detail };
      });
    } catch (e) {
      throw sourceError(name, e, url);
    }
  },

  async throwaway(dir) {
    const sd = serverDir(dir, "redis");
    const port = await freePort();
    const url = `redis://127.0.0.1:${port}`;
    const args = ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", sd.dir];
    const { child } = await startServer("redis-server", serverCommand("redis-server", args, sd), sd.dir, () => withClient(url, async (r) => (await r.ping()) === "PONG"));
    return { target: url, stop: () => stopServer(child, sd.dir) };
  },
};
