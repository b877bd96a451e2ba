/** `agentbak keygen`: throwaway or real key material in a folder. */
import { resolve } from "node:path";
import { keygen as generate, agentbakHome, type KeygenResult } from "../crypto/keys.js";
import { AgentbakError, Exit, placeError } from "../errors.js";

export interface KeygenOptions {
  out?: string;
  principal?: string;
}

/** Writes a new age identity and signing key. @throws AgentbakError(1) when keys already exist there. */
export async function keygen(opts: KeygenOptions): Promise<KeygenResult> {
  const dir = resolve(opts.out ?? agentbakHome());
  try {
    return generate(dir, opts.principal ?? "agentbak");
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    if (err.code === "EEXIST") throw new AgentbakError(Exit.failure, `keygen: ${err.message}; refusing to overwrite a key`);
    throw placeError(e, `keygen --out ${dir}`);
  }
}
