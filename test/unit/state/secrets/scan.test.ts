// Secret scanning: known token formats in values, keys, database cells (text and BLOB), file lines and names; findings say where, never what.
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import Database from "better-sqlite3";
import { detectSecret, nameMatcher, scanDatabase, scanText, scanValue, TextScanner } from "../../../../src/state/secrets/scan.js";

// built at run time so this file holds no literal token
const gh = "ghp_" + "A1b2C3d4".repeat(4) + "E5f6";
const aws = "AKIA" + "ABCDEFGHIJKLMNOP";
const openai = "sk-proj-" + "x".repeat(24);
const pem = "-----BEGIN OPENSSH " + "PRIVATE KEY-----";

describe("detectSecret", () => {
  it("names the format of each known token", () => {
    expect([gh, aws, openai, pem, `token=${gh};`].map(detectSecret)).toEqual(["GitHub token", "AWS access key id", "OpenAI API key", "private key block", "GitHub token"]);
  });
  it("leaves look-alikes alone: a prefix alone, too short, or glued inside a word", () => {
    expect(["sk-short", "ghp_" + "a".repeat(10), "xAKIA" + "ABCDEFGHIJKLMNOP", "AKIA" + "abcdefghijklmnop", "just text"].map(detectSecret)).toEqual([null, null, null, null, null]);
  });
});

describe("scanValue", () => {
  it("walks JSON by path, and flags a secret used as a key", () => {
    expect(scanValue({ a: [1, { t: gh }], [aws]: "x", ok: "fine" }, "$")).toEqual([
      { where: "$.a[1].t", kind: "GitHub token" },
      { where: "$ (a key)", kind: "AWS access key id" },
    ]);
  });
});

describe("scanDatabase", () => {
  it("finds tokens in text and BLOB cells of any column, naming table, column and rowid, at most `limit`", () => {
    const db = new Database(":memory:");
    db.exec('CREATE TABLE notes (a TEXT, "b c" BLOB); CREATE TABLE clean (x)');
    const ins = db.prepare("INSERT INTO notes VALUES (?, ?)");
    ins.run("nothing", null);
    ins.run(`see ${gh}`, null);
    ins.run("x", Buffer.from(`bin\0${aws}\0`, "latin1"));
    db.prepare("INSERT INTO clean VALUES (?)").run("sk-");
    expect(scanDatabase(db, "state")).toEqual([
      { where: "database state: notes.a rowid 2", kind: "GitHub token" },
      { where: "database state: notes.b c rowid 3", kind: "AWS access key id" },
    ]);
    expect(scanDatabase(db, "state", 1)).toHaveLength(1);
  });
});

describe("scanText", () => {
  it("names lines, any encoding, at most `limit`", () => {
    const text = Buffer.from(`line one\nkey: ${aws}\n\xff\xfe ${gh}\n`, "latin1");
    expect(scanText(text, "prompts/a.md")).toEqual([
      { where: "prompts/a.md line 2", kind: "AWS access key id" },
      { where: "prompts/a.md line 3", kind: "GitHub token" },
    ]);
    expect(scanText(text, "f", 1)).toHaveLength(1);
    expect(scanText(Buffer.from("nothing here"), "f")).toEqual([]);
  });
});

/** TextScanner fed `bytes` in pieces of the given sizes (cycled), with a small window and overlap. */
function scanInPieces(bytes: Buffer, sizes: number[], window: number, overlap: number, limit = 20) {
  const sc = new TextScanner("f", limit, window, overlap);
  for (let at = 0, i = 0; at < bytes.length; i++) {
    const n = Math.max(1, sizes[i % sizes.length]!);
    sc.push(bytes.subarray(at, at + n));
    at += n;
  }
  return sc.end();
}

describe("TextScanner (a file scanned in pieces)", () => {
  // tokens, near misses (a token inside a longer word, one character short), newlines and filler, run together
  const parts = [gh, aws, openai, pem, "x" + gh, gh + "Z", "AKIA" + "ABCDEFGHIJKLMNO", "sk-", "\n", "\r\n", " ", "ab", "\xff", "-----BEGIN ", "Q".repeat(300)];
  const text = fc.array(fc.constantFrom(...parts), { maxLength: 60 }).map((a) => Buffer.from(a.join(""), "latin1"));

  it("finds what scanText finds in the whole file, however it is split and windowed (fast-check)", () => {
    fc.assert(
      fc.property(text, fc.array(fc.integer({ min: 1, max: 400 }), { minLength: 1, maxLength: 8 }), fc.integer({ min: 200, max: 2000 }), fc.integer({ min: 1, max: 20 }), (bytes, sizes, window, limit) => {
        expect(scanInPieces(bytes, sizes, window, 100, limit)).toEqual(scanText(bytes, "f", limit));
      }),
      { numRuns: 400 },
    );
  });

  it("a token split across two pieces, in a line longer than the window, is found with its line (a real file read in pieces)", () => {
    // 3 MiB of filler with no newline, the token straddling the 1 MiB piece boundary, then a second line
    const head = Buffer.alloc(1024 * 1024 - 10, "q");
    const bytes = Buffer.concat([Buffer.from("first line\n"), head, Buffer.from(` ${aws} `), Buffer.alloc(2 * 1024 * 1024, "q"), Buffer.from(`\nnext ${gh}\n`)]);
    const pieces = new TextScanner("big.bin");
    for (let at = 0; at < bytes.length; at += 1024 * 1024) pieces.push(bytes.subarray(at, at + 1024 * 1024));
    const found = [
      { where: "big.bin line 2", kind: "AWS access key id" },
      { where: "big.bin line 3", kind: "GitHub token" },
    ];
    expect(pieces.end()).toEqual(found);
    expect(scanText(bytes, "big.bin")).toEqual(found);
  });

  it("at every cut through a token and its neighbours, a window's edge changes nothing (word boundaries, the overlap)", () => {
    // a line longer than the window, so the first piece's tail is scanned and cut to its overlap wherever it ends:
    // a token inside a longer word (no boundary before ghp_ or after it), and whole ones
    const y = "y".repeat(1000);
    for (const mid of ["x" + gh + " ", " " + gh + "Z", " " + aws + " ", " " + gh + " ", " " + openai + " "]) {
      const bytes = Buffer.from(y + mid + y, "latin1");
      const want = scanText(bytes, "f");
      for (let first = 960; first <= 1150; first++) expect([mid.slice(0, 6), first, scanInPieces(bytes, [first, 3000], 300, 100)]).toEqual([mid.slice(0, 6), first, want]);
    }
  });

  it("refuses a window not larger than its overlap", () => {
    expect(() => new TextScanner("f", 20, 100, 100)).toThrow(/not larger than its overlap/);
  });
});

describe("nameMatcher", () => {
  it("gitignore-style: a name at any depth, anchored paths, * within a name, ** across folders, folders cover their contents", () => {
    const m = nameMatcher([".env", "*.pem", "secrets/", "config/**/token?.json"]);
    expect([".env", "app/.env", "app/.env.example", "keys/server.pem", "secrets/x/y", "config/a/b/token1.json", "config/token12.json", "app/secrets/x"].map(m)).toEqual([
      ".env", ".env", null, "*.pem", "secrets/", "config/**/token?.json", null, null,
    ]);
  });
});
