import type { UpstreamKind } from '../../config.js';
import type { Dialect } from '../dialect.js';
import { deepseek } from './deepseek.js';
import { llamacpp } from './llamacpp.js';
import { openai } from './openai.js';
import { parleyEngine } from './parley-engine.js';
import { sglang } from './sglang.js';
import { vllm } from './vllm.js';

export const DIALECTS: Record<UpstreamKind, Dialect> = {
  openai,
  vllm,
  sglang,
  llamacpp,
  deepseek,
  'parley-engine': parleyEngine,
};
