/** Bounded concurrency: a fleet's agents read 64 at a time, not one by one nor a thousand at once. */

/** `f` over `items`, at most `n` at once; the results in the items' order. A rejection rejects the whole (the rest still finish). */
export async function mapLimit<T, R>(items: T[], n: number, f: (x: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < items.length; i = next++) out[i] = await f(items[i]!);
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(n, items.length)) }, worker));
  return out;
}
