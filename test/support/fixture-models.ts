// The GGUF fixtures with real tokenizers in ../shared/models, beside the
// project: CI always has them, a user's machine does not, so tests run them
// when they are there.
import { existsSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';

const SHARED_MODELS = resolve(__dirname, '../../../shared/models');

/** Paths of the fixture models; none when ../shared/models is absent. */
export const fixtureModelPaths: string[] = existsSync(SHARED_MODELS)
  ? readdirSync(SHARED_MODELS).filter((f) => f.endsWith('.gguf')).map((f) => join(SHARED_MODELS, f))
  : [];
