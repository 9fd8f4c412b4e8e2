// Parley's own local engine speaks OpenAI's format, with developer messages
// and max_tokens as llama.cpp-style servers take them.
import { openAiCompatible } from '../dialect.js';
import { LLAMACPP_LOAD } from './llamacpp.js';

// Its load at /metrics in llama-server's names (engine/server.ts).
// It takes `cache_salt` as vLLM does: a sequence another salt filled is not read from (engine/sequence-pool.ts).
export const parleyEngine = openAiCompatible({ chunkFraming: {}, engineLoad: LLAMACPP_LOAD, saltsPrefixCache: true });
