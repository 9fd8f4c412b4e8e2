// Settlements that could not reach Redis, kept on disk so that they outlive
// the replica that owes them. A settlement is appended (and synced) the
// moment Redis is found away, and marked landed when Redis takes it; a
// journal whose settlements have all landed is emptied.
//
// Each process writes its own file, named after its host (a pod's name on
// Kubernetes, where the data folder is an emptyDir that survives a
// container's restart) and its pid. A process adopts the files of its host
// whose process is gone (its previous life, or a replica beside it on the
// same data folder), and any file no one has written for longer than a hold
// lives (a replica that is gone, on a shared volume). Adopting copies
// the settlements still owed into its own journal before the old file goes:
// settling is idempotent per request id, so one replayed twice is charged once.
import { closeSync, existsSync, fsyncSync, ftruncateSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { Settlement } from './credit-ledger.js';

type Entry = { owed: Settlement } | { landed: string };

const SUFFIX = '.jsonl';

const safeName = (host: string) => host.replace(/[^\w-]/g, '_');

export class SettlementJournal {
  private readonly fd: number;
  private readonly owed = new Set<string>();
  private closed = false;

  private constructor(private readonly dir: string, readonly path: string, private readonly host: string) {
    this.fd = openSync(path, 'a');
  }

  /** Opens this process's journal in `dir`; one an earlier process of the same pid left there is set aside first, for `adopt`. */
  static open(dir: string, host = hostname(), pid = process.pid): SettlementJournal {
    mkdirSync(dir, { recursive: true });
    const path = join(dir, `${safeName(host)}.${pid}${SUFFIX}`);
    if (existsSync(path)) renameSync(path, join(dir, `${safeName(host)}.${pid}-before-${Date.now()}${SUFFIX}`));
    return new SettlementJournal(dir, path, safeName(host));
  }

  /** Files of this host whose process is gone, and any untouched for `abandonedAfterMs`. */
  orphans(abandonedAfterMs: number): string[] {
    const now = Date.now();
    return readdirSync(this.dir)
      .filter((name) => name.endsWith(SUFFIX))
      .filter((name) => join(this.dir, name) !== this.path)
      .filter((name) => this.ownerIsGone(name) || now - statSync(join(this.dir, name)).mtimeMs > abandonedAfterMs)
      .map((name) => join(this.dir, name));
  }

  private ownerIsGone(name: string): boolean {
    const owner = /^(.*)\.(\d+)(-before-\d+)?\.jsonl$/.exec(name);
    if (!owner || owner[1] !== this.host) return false;
    if (owner[3] || Number(owner[2]) === process.pid) return true;
    try {
      process.kill(Number(owner[2]), 0);
      return false;
    } catch (err) {
      return (err as NodeJS.ErrnoException).code === 'ESRCH';
    }
  }

  /** The settlements a journal file still owes, in the order they were written. */
  static owedIn(file: string): Settlement[] {
    const owed = new Map<string, Settlement>();
    for (const line of readFileSync(file, 'utf8').split('\n')) {
      let entry: Entry;
      try {
        entry = JSON.parse(line);
      } catch {
        continue; // a line cut short by a crash: its settlement was never acknowledged as kept
      }
      if ('owed' in entry) owed.set(entry.owed.requestId, entry.owed);
      else owed.delete(entry.landed);
    }
    return [...owed.values()];
  }

  /** Keeps `s` on disk before returning. */
  record(s: Settlement): void {
    if (this.closed || this.owed.has(s.requestId)) return;
    this.append({ owed: s });
    this.owed.add(s.requestId);
  }

  /** Settlements on disk that have not landed in Redis yet. */
  get owedCount(): number {
    return this.owed.size;
  }

  landed(requestId: string): void {
    if (this.closed || !this.owed.delete(requestId)) return;
    if (this.owed.size === 0) ftruncateSync(this.fd, 0);
    else this.append({ landed: requestId });
  }

  /** Takes `file`'s settlements into this journal, then deletes it; returns them. */
  adopt(file: string): Settlement[] {
    const owed = SettlementJournal.owedIn(file);
    for (const s of owed) this.record(s);
    unlinkSync(file);
    return owed;
  }

  /** What is still owed stays in the file, for the next process to adopt. */
  close(): void {
    this.closed = true;
    closeSync(this.fd);
  }

  private append(entry: Entry): void {
    writeSync(this.fd, `${JSON.stringify(entry)}\n`);
    fsyncSync(this.fd);
  }
}
