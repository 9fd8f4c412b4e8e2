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

/** Counts a conversation's tokens as the model sees them, and says how many bytes of text one token can be at most. */
export interface PromptCounter {
  count(messages: ChatMessage[]): number;
  /** No token of the vocabulary is more UTF-8 bytes than this: a text of b bytes is at least b / maxTokenBytes tokens. */
  maxTokenBytes: number;
}

/**
 * The most UTF-8 bytes one token of `model` stands for: its longest entry in
 * the vocabulary as written there, which is never shorter than what it
 * stands for (a byte-level BPE writes one character a byte, SentencePiece
 * writes a space as "▁" and a byte as "<0x0A>").
 */
export function maxTokenBytes(model: LlamaModel): number {
  let most = 1;
  for (const token of model.fileInfo.metadata.tokenizer.ggml.tokens) most = Math.max(most, Buffer.byteLength(token));
  return most;
}

/** A prompt counter for the gateway: only the GGUF's vocabulary and template are loaded. */
export async function loadPromptCounter(ggufPath: string): Promise<PromptCounter> {
  const llama = await localLlama();
  const model = await llama.loadModel({ modelPath: ggufPath, vocabOnly: true });
  const prompt = new ChatPrompt(model);
  return { count: (messages) => prompt.tokens(messages).length, maxTokenBytes: maxTokenBytes(model) };
}
