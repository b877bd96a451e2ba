/**
 * Facts the whole house shares, spelled once, low in the house (a base
 * module: it imports nothing of ours).
 */

/**
 * Characters that can steer a terminal or reorder what a person reads: C0/C1
 * controls, DEL, Unicode format controls (bidi overrides and isolates,
 * zero-width characters), line and paragraph separators, lone surrogates.
 * `ui/escape.ts` shows them escaped; labels and restore-request fields holding
 * one are refused at input.
 */
export const UNSAFE_TEXT = /[\x00-\x1f\x7f-\x9f\p{Cf}\p{Zl}\p{Zp}\p{Cs}]/u;

/** Whether `s` holds a character `UNSAFE_TEXT` matches. */
export const hasUnsafeText = (s: string): boolean => UNSAFE_TEXT.test(s);

/** The password of a URL (`scheme://user:PASSWORD@host`), up to the last `@` of its authority, anywhere in a text. */
const URL_PASSWORD = /\b([a-z][a-z0-9+.-]*:\/\/[^\s:@/?#]*):[^\s/?#]*@/gi;

/**
 * `text` with the password of every URL in it replaced by `***`: what
 * agentbak echoes (an error, a plan, a receipt, a log line) never carries a
 * connection's password.
 */
export const redactUrls = (text: string): string => text.replace(URL_PASSWORD, "$1:***@");
