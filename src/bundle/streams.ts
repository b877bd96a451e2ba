/**
 * Small stream helpers shared by the bundle writer and reader.
 */
import { createHash, type Hash } from "node:crypto";
import { Transform, type TransformCallback } from "node:stream";

/** A pass-through that hashes (sha256) and counts what flows through it. */
export class HashTap extends Transform {
  readonly hash: Hash = createHash("sha256");
  bytes = 0;
  constructor(private readonly limit = Number.POSITIVE_INFINITY, private readonly what = "stream") {
    super();
  }
  override _transform(chunk: Buffer, _e: BufferEncoding, cb: TransformCallback): void {
    this.bytes += chunk.length;
    if (this.bytes > this.limit) return cb(Object.assign(new Error(`${this.what} exceeds its declared size of ${this.limit} bytes`), { code: "OVERSIZE" }));
    this.hash.update(chunk);
    cb(null, chunk);
  }
  digest(): string {
    return this.hash.digest("hex");
  }
}

/** A pass-through that only counts bytes. */
export class ByteCounter extends Transform {
  bytes = 0;
  override _transform(chunk: Buffer, _e: BufferEncoding, cb: TransformCallback): void {
    this.bytes += chunk.length;
    cb(null, chunk);
  }
}
