/** `agentbak keygen`: throwaway or real key material in a folder. */
import { resolve } from "node:path";
import { keygen as generate, type KeygenResult } from "../crypto/keys.js";
import { AgentbakError, Exit, placeError } from "../errors.js";
import { agentbakHome } from "../home.js";

export interface KeygenOptions {
  out?: string;
  principal?: string;
}

/** Writes a new age identity and signing key. @throws AgentbakError(1) when keys already exist there. */
export async function keygen(opts: KeygenOptions): Promise<KeygenResult> {
  const dir = resolve(opts.out ?? agentbakHome());
  const principal = opts.principal ?? "agentbak";
  // the principal is a field of allowed_signers: whitespace, commas, quotes or a line break would change what that line says
  if (!/^[A-Za-z0-9._@+-]{1,64}$/.test(principal)) throw new AgentbakError(Exit.usage, "keygen --principal: 1 to 64 of A-Z a-z 0-9 . _ @ + - (it is a field of allowed_signers)");
  try {
    return generate(dir, principal);
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    if (err.code === "EEXIST") throw new AgentbakError(Exit.failure, `keygen: ${err.message}; refusing to overwrite a key`);
    throw placeError(e, `keygen --out ${dir}`);
  }
}
