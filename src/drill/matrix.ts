/**
 * What the nemeses share (nemesis.ts, eio.ts): a cell of the nemesis matrix.
 */

/** One cell of the matrix. */
export interface NemesisCell {
  scenario: string;
  nemesis: string;
  result: "recovered" | "contained" | "failed";
  /** the first failed check, when failed */
  check: string | null;
  detail: string;
}
