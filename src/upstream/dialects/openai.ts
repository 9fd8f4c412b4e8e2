// OpenAI itself and any server that follows it to the letter.
import { openAiCachedTokens, openAiCompatible } from '../dialect.js';

export const openai = openAiCompatible({ openAiNativeParams: true, cachedTokens: openAiCachedTokens });
