/**
 * The walk of a backup, measured by reading (a static call walk, reproducible: the same sources give the same
 * figures): from `backup` in src/commands/backup.ts, every call made on the way to the committed bundle is followed,
 * in source order, through the type checker, into the function it reaches in src/; each function is walked once
 * (a second call to it is a step there and back). Callbacks are followed where they
 * are called: a function passed as an argument (or as a property of an object passed) is walked when the callee
 * calls that parameter. Error paths (throw, catch) are not walked; each call site is walked once per path (loops
 * are not unrolled, recursion is cut). Calls into the base modules (errors, facts, fsutil, …: leaves every layer
 * uses) and into libraries are not counted.
 *
 * Counted between files: calls (down or sideways in the house), climbs (a call into a file higher in the house,
 * or back into a file already on the call stack: a caller's) and returns (each call between files returns).
 *
 * The figure is given for the backup's own path (steps into, out of or along commands/ and capture/) and for the
 * whole house.
 *
 * usage: node dist/tools/walk.js [checkout] [--sequence [--all]]   (checkout: a folder with src/, default .)
 */
import { readdirSync, statSync } from "node:fs";
import { join, relative, resolve, sep } from "node:path";
import ts from "typescript";

const BASE = /^(errors|facts|fsutil|cleanup|contained|crashpoint|duration|home|version|zod)\.ts$/;

/** A file's height in the house (the layers of .dependency-cruiser.cjs): higher calls lower. */
export function height(file: string): number {
  const [top, wing] = file.split("/");
  if (BASE.test(file)) return 0;
  if (top === "state") return 1 + ({ sqlite: 0, sources: 0, secrets: 0.1, pages: 0.1, inspect: 0.2, workspace: 0.2 }[wing ?? ""] ?? 0.1);
  const h: Record<string, number> = { crypto: 1, storage: 1, config: 2, chunks: 2, bundle: 2, repository: 3, reconcile: 3, fleet: 3, capture: 4, restore: 4, drill: 4, agentapi: 5, commands: 6, ui: 7, "cli.ts": 8, "main.ts": 9 };
  return h[top!] ?? 0;
}

/** One step between files. */
export interface Step {
  kind: "call" | "climb" | "return";
  from: string;
  to: string;
}

type Fn = ts.FunctionLikeDeclaration & { body: ts.Node };
/** A value the walk can call or look into: a function or an object literal, with the bindings it was made in. */
interface Value {
  node: Fn | ts.ObjectLiteralExpression;
  env: Env;
}
type Env = Map<ts.Symbol, Value>;

const isFn = (n: ts.Node | undefined): n is Fn => !!n && (ts.isFunctionDeclaration(n) || ts.isMethodDeclaration(n) || ts.isConstructorDeclaration(n) || ts.isArrowFunction(n) || ts.isFunctionExpression(n)) && !!n.body;

/** Walks the backup in the checkout at `root`. @returns the steps between files, in order */
export function walkBackup(root: string, entry = { file: "commands/backup.ts", name: "backup" }): Step[] {
  const srcDir = resolve(root, "src");
  const files: string[] = [];
  const list = (d: string) => readdirSync(d).forEach((f) => (statSync(join(d, f)).isDirectory() ? list(join(d, f)) : f.endsWith(".ts") && files.push(join(d, f))));
  list(srcDir);
  const program = ts.createProgram(files, { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, strict: true, skipLibCheck: true, types: ["node"], noEmit: true });
  const checker = program.getTypeChecker();
  const rel = (n: ts.Node) => relative(srcDir, n.getSourceFile().fileName).split(sep).join("/");
  const inSrc = (n: ts.Node) => n.getSourceFile().fileName.startsWith(srcDir + sep) || n.getSourceFile().fileName.startsWith(srcDir + "/");
  const steps: Step[] = [];
  const onStack: Fn[] = [];
  const walked = new Set<Fn>();
  const files_: string[] = [];

  const symbolOf = (n: ts.Node): ts.Symbol | undefined => {
    const s = checker.getSymbolAtLocation(n);
    return s && s.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(s) : s;
  };
  /** What an expression is, when it is a function or an object literal the walk can see. */
  const valueOf = (e: ts.Expression | undefined, env: Env): Value | undefined => {
    if (!e) return undefined;
    while (ts.isParenthesizedExpression(e) || ts.isAsExpression(e) || ts.isNonNullExpression(e) || ts.isAwaitExpression(e)) e = e.expression;
    if (isFn(e) || ts.isObjectLiteralExpression(e)) return { node: e, env };
    if (ts.isConditionalExpression(e)) return valueOf(e.whenTrue, env) ?? valueOf(e.whenFalse, env);
    if (ts.isIdentifier(e)) return valueOfSymbol(symbolOf(e), env);
    if (ts.isPropertyAccessExpression(e)) {
      const obj = valueOf(e.expression, env);
      if (obj && ts.isObjectLiteralExpression(obj.node)) return property(obj, e.name.text);
      const d = symbolOf(e.name)?.valueDeclaration;
      return isFn(d) && inSrc(d) ? { node: d, env: new Map() } : undefined;
    }
    return undefined;
  };
  const valueOfSymbol = (s: ts.Symbol | undefined, env: Env): Value | undefined => {
    if (!s) return undefined;
    const bound = env.get(s);
    if (bound) return bound;
    const d = s.valueDeclaration;
    if (isFn(d)) return { node: d, env: new Map() };
    return d && ts.isVariableDeclaration(d) && d.initializer && inSrc(d) ? valueOf(d.initializer, env) : undefined;
  };
  const property = (obj: Value, name: string): Value | undefined => {
    const props = (obj.node as ts.ObjectLiteralExpression).properties;
    for (let i = props.length - 1; i >= 0; i--) {
      const p = props[i]!;
      if (ts.isSpreadAssignment(p)) {
        const inner = valueOf(p.expression, obj.env);
        const v = inner && ts.isObjectLiteralExpression(inner.node) ? property(inner, name) : undefined;
        if (v) return v;
      } else if (p.name && ts.isIdentifier(p.name) && p.name.text === name) {
        if (ts.isPropertyAssignment(p)) return valueOf(p.initializer, obj.env);
        if (ts.isShorthandPropertyAssignment(p)) return valueOfSymbol(checker.getShorthandAssignmentValueSymbol(p), obj.env);
        if (isFn(p)) return { node: p, env: obj.env };
      }
    }
    return undefined;
  };
  /** The function a call reaches, with its bindings, when it is in src/. */
  const target = (c: ts.CallExpression | ts.NewExpression, env: Env): Value | undefined => {
    const e = c.expression;
    const v = valueOf(e, env);
    if (v && isFn(v.node) && inSrc(v.node)) return v;
    const d = checker.getResolvedSignature(c)?.declaration;
    if (isFn(d) && inSrc(d)) return { node: d, env: new Map() };
    if (ts.isNewExpression(c)) {
      const cls = symbolOf(c.expression)?.valueDeclaration;
      const ctor = cls && ts.isClassDeclaration(cls) ? cls.members.find(ts.isConstructorDeclaration) : undefined;
      if (isFn(ctor) && inSrc(ctor)) return { node: ctor, env: new Map() };
    }
    return undefined;
  };
  const call = (c: ts.CallExpression | ts.NewExpression, t: Value, from: string, env: Env) => {
    const fn = t.node as Fn;
    if (onStack.includes(fn) || onStack.length > 80) return;
    const to = rel(fn);
    const inner: Env = new Map(t.env);
    fn.parameters.forEach((p, i) => {
      const s = ts.isIdentifier(p.name) ? symbolOf(p.name) : undefined;
      const v = valueOf(c.arguments?.[i], env);
      if (s && v) inner.set(s, v);
    });
    const counted = to !== from && !BASE.test(to);
    if (counted) steps.push({ kind: height(to) > height(from) || files_.includes(to) ? "climb" : "call", from, to });
    onStack.push(fn);
    if (counted) files_.push(from);
    // a reader walks a function once: called again, it is a step there and back, not a second walk through it
    if (!walked.has(fn)) walked.add(fn), walk(fn.body, counted ? to : from, inner);
    if (counted) files_.pop();
    onStack.pop();
    if (counted) steps.push({ kind: "return", from: to, to: from });
  };
  const walk = (n: ts.Node, file: string, env: Env): void => {
    if (ts.isThrowStatement(n) || ts.isCatchClause(n)) return;
    if (isFn(n)) return; // walked where it is called (or inline, below)
    if (ts.isCallExpression(n) || ts.isNewExpression(n)) {
      walk(n.expression, file, env);
      const t = target(n, env);
      for (const a of n.arguments ?? []) {
        // a function handed to a library (map, forEach, Promise…) runs in place; one handed to src/ runs when called
        if (isFn(a) && !t) walk(a.body, file, env);
        else walk(a, file, env);
      }
      if (t) call(n, t, file, env);
      return;
    }
    ts.forEachChild(n, (ch) => walk(ch, file, env));
  };

  const sf = program.getSourceFile(join(srcDir, entry.file));
  const fn = sf?.statements.find((s): s is ts.FunctionDeclaration => ts.isFunctionDeclaration(s) && s.name?.text === entry.name);
  if (!fn?.body) throw new Error(`no function ${entry.name} in src/${entry.file}`);
  onStack.push(fn as Fn);
  walk(fn.body, entry.file, new Map());
  return steps;
}

/** The backup's own path: the command and the capture stage. A step on it leaves it, enters it, or moves along it. */
export const onPath = (s: Step) => /^(commands|capture)\//.test(s.from) || /^(commands|capture)\//.test(s.to);

/** The counts of each kind of step. */
export function tally(steps: Step[]): Record<Step["kind"], number> {
  return { call: steps.filter((s) => s.kind === "call").length, climb: steps.filter((s) => s.kind === "climb").length, return: steps.filter((s) => s.kind === "return").length };
}

if (process.argv[1] && resolve(process.argv[1]).endsWith(join("tools", "walk.js"))) {
  const args = process.argv.slice(2);
  const steps = walkBackup(args.find((a) => !a.startsWith("--")) ?? ".");
  const path = steps.filter(onPath);
  if (args.includes("--sequence")) for (const s of args.includes("--all") ? steps : path) console.log(`${s.kind.padEnd(6)} ${s.from} -> ${s.to}`);
  const line = (what: string, t: ReturnType<typeof tally>) => console.log(`${what}: ${t.call + t.climb} calls between files, of them ${t.climb} climbs; ${t.return} returns`);
  line("walk of a backup, on its path (commands/, capture/)", tally(path));
  line("walk of a backup, the whole house", tally(steps));
}
