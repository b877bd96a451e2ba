/** `agentbak token create|list|revoke`: bearer tokens of the agent interface, kept hashed in AGENTBAK_HOME. */
import { createToken, listTokens, revokeToken, type TokenRecord, type TokenView } from "../agentapi/tokens.js";
import { agentbakHome } from "../home.js";

const show = ({ sha256: _s, ...r }: TokenRecord): TokenView => r;

/** Creates a token; the result is the only place the token appears. */
export function tokenCreate(opts: { tenant: string; agent: string; tier: string }): TokenView & { token: string } {
  const { token, record } = createToken(agentbakHome(), opts);
  return { ...show(record), token };
}

export function tokenList(): TokenView[] {
  return listTokens(agentbakHome()).map(show);
}

export function tokenRevoke(id: string): TokenView {
  return show(revokeToken(agentbakHome(), id));
}
