/** The kinds of external state source a bundle can carry (no driver code: the manifest reader needs only the names). */
export const SOURCE_KINDS = ["postgres", "redis", "lancedb"] as const;
export type SourceKind = (typeof SOURCE_KINDS)[number];
