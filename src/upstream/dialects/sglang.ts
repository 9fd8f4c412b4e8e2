// SGLang reports cached prompt tokens in OpenAI's field when started with
// --enable-cache-report, and otherwise not at all.
import { openAiCachedTokens, openAiCompatible } from '../dialect.js';

export const sglang = openAiCompatible({
  matchedStop: (choice) => choice.matched_stop,
  understands: ['user', 'reasoning_effort'],
  // matched_stop null on every choice, and a null usage. Older releases write every null field of the delta too: those take the full parse.
  chunkFraming: { choiceTail: ['matched_stop'], tailNull: ['usage'] },
  cachedTokens: openAiCachedTokens,
});
