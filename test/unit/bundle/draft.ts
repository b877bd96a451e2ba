// The manifest draft the bundle unit tests sign (one agent, one snapshot, no state beyond what a test adds).
import { fingerprint, type SigningKey } from "../../../src/crypto/sshsig.js";
import type { ManifestDraft } from "../../../src/bundle/writer.js";

export const manifestDraft = (key: SigningKey, recipient: string, o: Partial<ManifestDraft> = {}): ManifestDraft => ({
  format: "agentbak-bundle",
  format_version: 4,
  tool_version: "0.1.0",
  agent_id: "billing-agent",
  tenant: "acme",
  snapshot_id: "20261206T120000000Z-0123abcd",
  created_at: "2026-12-06T12:00:00.000Z",
  expires_at: "2027-12-06T12:00:00.000Z",
  sequence: 1,
  parent: null,
  label: null,
  idempotency_key: null,
  signer: { fingerprint: fingerprint(key.publicKey), principal: "backup@host" },
  recipients: [recipient],
  runtime: { image_digest: null, agent_version: null, models: {}, host: "h" },
  schema_version: null,
  workspace: null,
  credentials: [],
  cursors: {},
  cursor_queries: {},
  open_operations: [],
  ...o,
});
