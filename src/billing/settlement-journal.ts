// Settlements that could not reach Redis, kept on disk so that they outlive
// the replica that owes them. A settlement is appended (and synced) the
// moment Redis is found away, and marked landed when Redis takes it; a
// journal whose settlements have all landed is emptied.
//
// Each replica writes its own file, named after its host (a pod's name on
// Kubernetes, where the data folder is an emptyDir that survives a
// container's restart). At start a replica adopts what its previous life
// left, and at any time it adopts a file no one has written for longer than
// a hold lives (a replica that is gone, on a shared volume). Adopting copies
// the settlements still owed into its own journal before the old file goes:
// settling is idempotent per request id, so one replayed twice is charged once.
import { closeSync, existsSync, fsyncSync, ftruncateSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { Settlement } from './credit-ledger.js';

type Entry = { owed: Settlement } | { landed: string };

const SUFFIX = '.jsonl';

export class SettlementJournal {
  private readonly fd: number;
  private readonly owed = new Set<string>();
  private closed = false;

  private constructor(private readonly dir: string, readonly path: string) {
    this.fd = openSync(path, 'a');
  }

  /** Opens this replica's journal in `dir`, first setting aside what an earlier process of the same name left there, for `adopt`. */
  static open(dir: string, replica = hostname()): SettlementJournal {
    mkdirSync(dir, { recursive: true });
    const name = replica.replace(/[^\w-]/g, '_');
    const path = join(dir, `${name}${SUFFIX}`);
    if (existsSync(path)) renameSync(path, join(dir, `${name}.before-${Date.now()}${SUFFIX}`));
    return new SettlementJournal(dir, path);
  }

  /** Files left by earlier processes of this replica, and those untouched for `abandonedAfterMs`. */
  orphans(abandonedAfterMs: number): string[] {
    const now = Date.now();
    return readdirSync(this.dir)
      .filter((name) => name.endsWith(SUFFIX))
      .map((name) => join(this.dir, name))
      .filter((file) => file !== this.path)
      .filter((file) => file.includes('.before-') || now - statSync(file).mtimeMs > abandonedAfterMs);
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
