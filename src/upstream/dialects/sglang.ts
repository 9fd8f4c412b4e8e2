// SGLang reports cached prompt tokens in OpenAI's field when started with
// --enable-cache-report, and otherwise not at all.
import { openAiCachedTokens, openAiCompatible } from '../dialect.js';

export const sglang = openAiCompatible({ cachedTokens: openAiCachedTokens });
