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

  tokens(messages: CountedMessage[]): Token[] {
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

/** A conversation's text as counted: each message's role and text. */
export type CountedMessage = Pick<ChatMessage, 'role' | 'content'>;

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

/** Counts conversations as the model sees them, on the thread that calls it (engine/prompt-count-worker.ts): only the GGUF's vocabulary and template are loaded. */
export async function loadCountingPrompt(ggufPath: string): Promise<{ count(messages: CountedMessage[]): number; maxTokenBytes: number }> {
  const llama = await localLlama();
  const model = await llama.loadModel({ modelPath: ggufPath, vocabOnly: true });
  const prompt = new ChatPrompt(model);
  return { count: (messages) => prompt.tokens(messages).length, maxTokenBytes: maxTokenBytes(model) };
}
