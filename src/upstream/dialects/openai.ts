// OpenAI itself and any server that follows it to the letter.
import { OPENAI_EXTRA_FIELDS } from '../../protocol/chat-request.js';
import { openAiCompatible } from '../dialect.js';

export const openai = openAiCompatible({
  openAiNativeParams: true,
  understands: OPENAI_EXTRA_FIELDS,
  // A service tier and fingerprint on every chunk, random padding after it, and a null usage when usage was asked for.
  chunkFraming: { head: ['service_tier', 'system_fingerprint'], tailNull: ['usage'], tailString: ['obfuscation'] },
});
