/**
 * Cleanup on interruption: stages register what to remove if the process is
 * stopped by SIGINT/SIGTERM; main runs these before it exits. (kill -9 can not
 * be caught: leftovers carry the owner's pid and are swept by the next run.)
 */
import { rmSync } from "node:fs";

const tasks = new Set<() => void>();

/** Registers `fn`; returns a function that unregisters it. */
export function onInterrupt(fn: () => void): () => void {
  tasks.add(fn);
  return () => tasks.delete(fn);
}

/**
 * Removes `dir` (a staging or temp folder) now. On an interrupt a child
 * process (git, the drill's worker) may still be writing into it, so
 * ENOTEMPTY is retried a few times rather than leaving the folder behind.
 */
export function removeTree(dir: string): void {
  rmSync(dir, { recursive: true, force: true, maxRetries: 10, retryDelay: 50 });
}

/** Registers the removal of `dir` on an interrupt; returns a function that unregisters it. */
export const removeOnInterrupt = (dir: string): (() => void) => onInterrupt(() => removeTree(dir));

/** Runs every registered cleanup, ignoring individual failures. */
export function runInterruptCleanups(): void {
  for (const fn of tasks) {
    try {
      fn();
    } catch {
      /* best effort while exiting */
    }
  }
  tasks.clear();
}
