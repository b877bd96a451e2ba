/**
 * How far long work has got: the sink a command passes down to its stages in
 * their options (ui/progress.ts draws it; the stages never import ui/). A
 * stage names itself and its size in bytes when it starts, then counts bytes
 * where they already flow (a pass-through counter in a pipeline, never a
 * second read).
 */
export interface Progress {
  /**
   * Starts a stage (the one before it is finished).
   * @param name what is being done ("writing payload"), ours, never an agent's text
   * @param total its size in bytes, or undefined when not known
   * @returns the counter to call with each chunk's byte count
   */
  stage(name: string, total?: number): (bytes: number) => void;
}

/** A sink that shows nothing (no terminal and no --progress). */
export const noProgress: Progress = { stage: () => () => undefined };
