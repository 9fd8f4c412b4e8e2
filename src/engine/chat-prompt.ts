// Turns a conversation into the exact tokens a model sees, through the chat
// template of its GGUF. The engine evaluates these tokens and the gateway's
// context check counts them, so both agree to the token.
import { resolveChatWrapper, type ChatHistoryItem, type ChatWrapper, type LlamaModel, type Token } from 'node-llama-cpp';
import { messageText, type ChatMessage } from '../protocol/chat-request.js';
import { localLlama } from './llama.js';

export class ChatPrompt {
  private readonly wrapper: ChatWrapper;

  constructor(readonly model: LlamaModel) {
    this.wrapper = resolveChatWrapper(model);
  }

  tokens(messages: ChatMessage[]): Token[] {
    const history: ChatHistoryItem[] = messages.map((m): ChatHistoryItem => {
      const text = messageText(m);
      switch (m.role) {
        case 'system':
        case 'developer':
          return { type: 'system', text };
        case 'assistant':
          return { type: 'model', response: [text] };
        default:
          return { type: 'user', text };
      }
    });
    // An empty model turn at the end makes the template open the assistant's reply.
    history.push({ type: 'model', response: [] });
    return this.wrapper.generateContextState({ chatHistory: history }).contextText.tokenize(this.model.tokenizer);
  }
}

/** A prompt counter for the gateway: only the GGUF's vocabulary and template are loaded. */
export async function loadPromptCounter(ggufPath: string): Promise<(messages: ChatMessage[]) => number> {
  const llama = await localLlama();
  const model = await llama.loadModel({ modelPath: ggufPath, vocabOnly: true });
  const prompt = new ChatPrompt(model);
  return (messages) => prompt.tokens(messages).length;
}
