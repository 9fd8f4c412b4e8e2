// Parley's own local engine speaks OpenAI's format, with developer messages
// and max_tokens as llama.cpp-style servers take them.
import { openAiCompatible } from '../dialect.js';

export const parleyEngine = openAiCompatible({ chunkFraming: {} });
