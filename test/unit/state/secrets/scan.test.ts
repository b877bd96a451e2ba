// Secret scanning: known token formats in values, keys, database cells (text and BLOB), file lines and names; findings say where, never what.
import { describe, expect, it } from "vitest";
import Database from "better-sqlite3";
import { detectSecret, nameMatcher, scanDatabase, scanText, scanValue } from "../../../../src/state/secrets/scan.js";

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

describe("nameMatcher", () => {
  it("gitignore-style: a name at any depth, anchored paths, * within a name, ** across folders, folders cover their contents", () => {
    const m = nameMatcher([".env", "*.pem", "secrets/", "config/**/token?.json"]);
    expect([".env", "app/.env", "app/.env.example", "keys/server.pem", "secrets/x/y", "config/a/b/token1.json", "config/token12.json", "app/secrets/x"].map(m)).toEqual([
      ".env", ".env", null, "*.pem", "secrets/", "config/**/token?.json", null, null,
    ]);
  });
});
