/**
 * Bech32 (BIP 173) as age uses it for `age1...` recipients and
 * secret-key identities, without the 90-character limit.
 */

const CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l";
const GEN = [0x3b6a57b2, 0x26508e6d, 0x1ea119fa, 0x3d4233dd, 0x2a1462b3];

function polymod(values: number[]): number {
  let chk = 1;
  for (const v of values) {
    const top = chk >>> 25;
    chk = ((chk & 0x1ffffff) << 5) ^ v;
    for (let i = 0; i < 5; i++) if ((top >>> i) & 1) chk ^= GEN[i]!;
  }
  return chk;
}

function hrpExpand(hrp: string): number[] {
  const out: number[] = [];
  for (const c of hrp) out.push(c.charCodeAt(0) >>> 5);
  out.push(0);
  for (const c of hrp) out.push(c.charCodeAt(0) & 31);
  return out;
}

function convertBits(data: Uint8Array | number[], from: number, to: number, pad: boolean): number[] {
  let acc = 0;
  let bits = 0;
  const out: number[] = [];
  const maxv = (1 << to) - 1;
  for (const value of data) {
    if (value < 0 || value >> from !== 0) throw new Error("invalid bech32 data");
    acc = (acc << from) | value;
    bits += from;
    while (bits >= to) {
      bits -= to;
      out.push((acc >>> bits) & maxv);
    }
  }
  if (pad) {
    if (bits > 0) out.push((acc << (to - bits)) & maxv);
  } else if (bits >= from || ((acc << (to - bits)) & maxv) !== 0) {
    throw new Error("invalid bech32 padding");
  }
  return out;
}

/** Encodes bytes under a human-readable prefix; the result is lowercase. */
export function bech32Encode(hrp: string, data: Uint8Array): string {
  const words = convertBits(data, 8, 5, true);
  const values = [...hrpExpand(hrp), ...words];
  const mod = polymod([...values, 0, 0, 0, 0, 0, 0]) ^ 1;
  const checksum = Array.from({ length: 6 }, (_, i) => (mod >>> (5 * (5 - i))) & 31);
  return hrp + "1" + [...words, ...checksum].map((w) => CHARSET[w]).join("");
}

/**
 * Decodes a bech32 string (all upper or all lower case).
 * @throws Error when the checksum, case or characters are wrong.
 */
export function bech32Decode(s: string): { hrp: string; data: Uint8Array } {
  if (s !== s.toLowerCase() && s !== s.toUpperCase()) throw new Error("mixed-case bech32 string");
  const str = s.toLowerCase();
  const pos = str.lastIndexOf("1");
  if (pos < 1 || pos + 7 > str.length) throw new Error("invalid bech32 string");
  const hrp = str.slice(0, pos);
  const words: number[] = [];
  for (const c of str.slice(pos + 1)) {
    const v = CHARSET.indexOf(c);
    if (v < 0) throw new Error("invalid bech32 character");
    words.push(v);
  }
  if (polymod([...hrpExpand(hrp), ...words]) !== 1) throw new Error("invalid bech32 checksum");
  return { hrp, data: Uint8Array.from(convertBits(words.slice(0, -6), 5, 8, false)) };
}
