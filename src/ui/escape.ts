/**
 * The one escaping function for text that came from outside agentbak (an
 * agent, its database, a provider, a bundle) on its way to a terminal: every
 * character of UNSAFE_TEXT (controls, escape sequences, bidi and other format
 * controls, separators, lone surrogates) is shown as `\xNN` / `\uNNNN`, so such
 * text can never move the cursor, recolour, rewrite or reorder what a person
 * reads. JSON output keeps the exact value and does not use it.
 */
import { escapeUnsafe } from "../facts.js";

/**
 * Text safe to print.
 * @param s any text, possibly hostile
 * @returns `s` with every unsafe character replaced by its escape (ESC becomes the four visible characters `\x1b`)
 */
export function safe(s: string): string {
  return escapeUnsafe(s);
}

const ENTITIES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

/**
 * Text safe inside HTML (an element's text or a quoted attribute): what safe()
 * escapes is shown as `\xNN`, and & < > " ' become entities.
 * @param s any text, possibly hostile
 */
export function html(s: string): string {
  return safe(s).replace(/[&<>"']/g, (c) => ENTITIES[c]!);
}
