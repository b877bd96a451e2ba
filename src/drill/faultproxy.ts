/**
 * A fault proxy on 127.0.0.1 in front of an S3 endpoint (plain HTTP), for
 * the object-store nemeses of a drill's restore reads. Requests pass through
 * unchanged (the Host header too: the client's signature covers it), except:
 * - `s3_503`: the first two GETs answer 503 SlowDown, as a throttling store does;
 * - `s3_reset`: the first GET's connection is reset after half its body (a
 *   resumed read, a GET with a Range, is a GET too);
 * - `s3_drop_part`: the first GET's body arrives with a 64 KiB part (or its
 *   middle third, when smaller) cut out and a Content-Length that matches, so
 *   the transport sees nothing wrong.
 */
import { createServer, request, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/** The object-store faults the proxy can put on the restore's reads. */
export const STORE_NEMESES = ["s3_503", "s3_reset", "s3_drop_part"] as const;
export type StoreNemesis = (typeof STORE_NEMESES)[number];

/** A running proxy: where to send requests, what it did, and how to stop it. */
export interface FaultProxy {
  url: string;
  /** how many requests it faulted, and how many it saw */
  faulted: number;
  seen: number;
  stop(): Promise<void>;
}

const SLOW_DOWN = '<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>';

/**
 * Starts a proxy to `target` (http://host:port) that applies `fault`.
 * @param opts.times how many GETs it faults (default: 2 for s3_503, else 1)
 * @param opts.paths only GETs whose path matches are faulted
 * @param opts.onFault awaited with the request's path once a faulted answer's bytes are sent, before its connection is reset
 */
export async function startFaultProxy(target: string, fault: StoreNemesis, opts: { times?: number; paths?: RegExp; onFault?: (path: string) => Promise<void> } = {}): Promise<FaultProxy> {
  const to = new URL(target);
  if (to.protocol !== "http:") throw new Error(`the fault proxy forwards plain HTTP only, not ${to.protocol}`);
  let budget = opts.times ?? (fault === "s3_503" ? 2 : 1);
  const p: FaultProxy = { url: "", faulted: 0, seen: 0, stop: async () => undefined };
  const server = createServer((req, res) => {
    p.seen++;
    const hit = req.method === "GET" && budget > 0 && (!opts.paths || opts.paths.test(req.url ?? ""));
    if (hit) {
      budget--;
      p.faulted++;
    }
    if (hit && fault === "s3_503") {
      req.resume();
      res.writeHead(503, { "content-type": "application/xml", "content-length": Buffer.byteLength(SLOW_DOWN) }).end(SLOW_DOWN);
      return;
    }
    forward(req, res, to, hit ? fault : null, opts.onFault);
  });
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  p.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  p.stop = () =>
    new Promise<void>((ok) => {
      server.closeAllConnections();
      server.close(() => ok());
    });
  return p;
}

/** Forwards one request; `fault` (reset or drop a part) applies to its answer. */
function forward(req: IncomingMessage, res: ServerResponse, to: URL, fault: StoreNemesis | null, onFault?: (path: string) => Promise<void>): void {
  const up = request({ host: to.hostname, port: to.port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
    if (!fault) {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
      return;
    }
    const parts: Buffer[] = [];
    answer.on("data", (c: Buffer) => parts.push(c));
    answer.on("end", () => {
      const body = Buffer.concat(parts);
      if (fault === "s3_reset") {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        res.write(body.subarray(0, Math.floor(body.length / 2)), () => void (onFault?.(req.url ?? "") ?? Promise.resolve()).finally(() => res.socket?.destroy()));
        return;
      }
      const cut = Math.min(64 * 1024, Math.floor(body.length / 3));
      const at = Math.floor((body.length - cut) / 2);
      const dropped = Buffer.concat([body.subarray(0, at), body.subarray(at + cut)]);
      res.writeHead(answer.statusCode ?? 502, { ...answer.headers, "content-length": String(dropped.length) });
      res.end(dropped);
    });
  });
  up.on("error", () => res.destroy());
  req.pipe(up);
}
