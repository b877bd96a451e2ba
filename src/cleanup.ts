/**
 * Cleanup on interruption: stages register what to remove if the process is
 * stopped by SIGINT/SIGTERM, and the child processes that write into those
 * folders; main stops the children, then runs the removals, before it exits.
 * (kill -9 can not be caught: leftovers carry the owner's pid and are swept by
 * the next run.)
 */
import { rmSync } from "node:fs";
import { AgentbakError, Exit } from "./errors.js";

const tasks = new Set<() => unknown>();

/** What stopOnInterrupt needs of a child process (execa's subprocess is one). */
interface Child {
  readonly pid?: number | undefined;
  kill(signal: NodeJS.Signals): boolean;
  once(event: "exit" | "error", fn: () => void): unknown;
}
/** each tracked child and how to kill it */
const children = new Map<Child, () => void>();
let stopping = false;

/**
 * Tracks a child process that writes into a folder a cleanup removes (git into
 * a restore's workspace, the drill's worker, a throwaway server). On an
 * interrupt it is killed, and waited for, before any folder is removed: git
 * re-creates the leading folders of what it writes, so a folder removed under a
 * live git came back (seen as a drill temp folder left after Ctrl-C).
 * `group`: the child was started `detached` (its own process group) and the
 * whole group is killed, for a child whose own children write too (git clone
 * runs index-pack).
 * A child started once the interrupt began is killed at once.
 */
export function stopOnInterrupt<T extends Child>(child: T, o: { group?: boolean } = {}): T {
  const kill = () => {
    try {
      if (o.group && child.pid) process.kill(-child.pid, "SIGKILL");
      else child.kill("SIGKILL");
    } catch {
      /* already gone */
    }
  };
  children.set(child, kill);
  const done = () => children.delete(child);
  child.once("exit", done);
  child.once("error", done);
  if (stopping) kill();
  return child;
}

/**
 * Whether an interrupt is being handled: main is stopping the children before
 * it exits, and the command, whose awaits go on meanwhile (a killed git fails
 * the step that waited on it), may neither print a result nor commit anything.
 */
export const interrupting = (): boolean => stopping;

/** How many tracked children are running. */
export const liveChildren = (): number => children.size;

/** Kills every tracked child (SIGKILL) and waits until they have exited, at most `ms`. */
export async function stopChildren(ms = 3000): Promise<void> {
  stopping = true;
  for (const kill of children.values()) kill();
  const end = Date.now() + ms;
  while (children.size && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
}

let terminate: (() => void) | null = null;
/**
 * A long-running command that stops gracefully on SIGTERM (serve: finish the
 * requests in flight, then exit 0) says how; main calls it instead of treating
 * SIGTERM as an interrupt (130). Ctrl-C (SIGINT) stays an interrupt.
 */
export function onTerminate(fn: (() => void) | null): void {
  terminate = fn;
}
/** What SIGTERM should do instead of interrupting, or null. */
export const terminateHandler = (): (() => void) | null => terminate;

/**
 * Registers `fn`; returns a function that unregisters it. A cleanup that returns a promise (a lease's release:
 * one write marking its grant released) is waited for, a short while, before the process exits.
 */
export function onInterrupt(fn: () => unknown): () => void {
  tasks.add(fn);
  return () => tasks.delete(fn);
}

/**
 * Removes `dir` (a staging or temp folder) now. On an interrupt a child
 * process (git, the drill's worker) may still be writing into it, so
 * ENOTEMPTY is retried a few times rather than leaving the folder behind.
 * Never throws: it runs in `finally` blocks, where a throw would replace the
 * error that is being reported and skip the lock's release; a folder that
 * still can not be removed carries its owner's pid and is swept by the next run.
 * @returns whether the folder is gone
 */
export function removeTree(dir: string): boolean {
  try {
    rmSync(dir, { recursive: true, force: true, maxRetries: 10, retryDelay: 50 });
    return true;
  } catch {
    return false;
  }
}

/** Registers the removal of `dir` on an interrupt; returns a function that unregisters it. */
export const removeOnInterrupt = (dir: string): (() => void) => onInterrupt(() => removeTree(dir));

let done: string | null = null;

/**
 * Records something an interrupted exit must still report as done (a
 * snapshot whose commit marker is written: it is complete and listed, and a
 * bare "interrupted" would say nothing was published). It stays for the rest
 * of the process: the command goes on for tens of milliseconds after its
 * commit point (the audit record, the listing, printing the receipt), and a
 * signal then still exits 130. The newest one replaces the one before (a
 * server's shutdown line names its last commit, not all of them).
 */
export function doneBeforeInterrupt(what: string): void {
  done = what;
}

/**
 * Yields to the event loop, so a signal that has already arrived is
 * handled (the process cleans up and exits 130) before the step that
 * follows. Work on a local disk can run from one await to the next without
 * ever yielding: a Ctrl-C during it was handled only after the snapshot was
 * committed. Called before a commit point.
 * @throws AgentbakError(130) when an interrupt is being handled (its children are being stopped).
 */
export async function letInterruptsIn(): Promise<void> {
  // two turns: the first immediate may run before this turn's poll phase has read libuv's signal pipe; the
  // second runs after the next poll phase, which has (one turn was not enough: a SIGINT sent before the
  // commit marker was still handled after it)
  for (let i = 0; i < 2; i++) await new Promise((r) => setImmediate(r));
  // main is stopping children before it exits: the step that follows must not run meanwhile
  if (stopping) throw new AgentbakError(Exit.interrupted, "interrupted");
}

/** The line of an interrupted exit: "interrupted", and what was done before it. */
export const interruptedMessage = (): string => (done ? `interrupted after ${done}` : "interrupted");

/** How long an interrupted process waits for its asynchronous cleanups (the leases' releases) before it exits. */
export const CLEANUP_WAIT_MS = 2000;

/**
 * Runs every registered cleanup, ignoring individual failures. When some are asynchronous the process is
 * stopping from here on: the command's own awaits may still resume while they settle, but every commit point
 * (letInterruptsIn, the repository's fence before a commit or a delete) throws, and nothing is printed.
 * @returns null when every cleanup is done; else a promise that settles when the asynchronous ones have, or after `ms`
 */
export function runInterruptCleanups(ms = CLEANUP_WAIT_MS): Promise<void> | null {
  const pending: Promise<unknown>[] = [];
  for (const fn of tasks) {
    try {
      const r = fn();
      if (r instanceof Promise) pending.push(r.catch(() => undefined));
    } catch {
      /* best effort while exiting */
    }
  }
  tasks.clear();
  if (!pending.length) return null; // the process exits now: nothing else runs
  stopping = true; // the command's awaits may resume while these settle: none of them commits, nor prints
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    void Promise.all(pending).then(() => {
      clearTimeout(t);
      resolve();
    });
  });
}
