/**
 * The page engine's front: what the rest of the house may use of state/pages/
 * (the lint holds every import from outside to this file). Inside, calls go
 * one way: delta.ts, snapshot.ts -> blocks.ts, pageindex.ts; blocks.ts and
 * pageindex.ts import neither each other nor delta.ts or snapshot.ts.
 */
export { BlockSummer, BlockSumsStore, blockSeed, SnapshotSums, type SumsRef } from "./blocks.js";
export { applyDelta, DeltaWriter, hashTail, usableBase, type DeltaBase, type RunScan, type TailPart } from "./delta.js";
export { applyIndexChain, changedIn, decodeIndex, encodeIndex, encodeIndexChanges, filePagesRoot, hashesFrom, HeadHashed, indexPages, indexParent, PageDigest, PageHasher, pageIndexKey, pagesRoot, sealIndex, setHashes, signedIndex, storedIndex, type PageIndex } from "./pageindex.js";
export { openSnapshotPages, type ParentDatabase, type SnapshotPages } from "./snapshot.js";
