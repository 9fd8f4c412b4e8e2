// A minimal writer for GGUF version 3, the file format llama.cpp loads.
// It supports what Parley's own model needs: scalar, string and array
// metadata, and F32 tensors. Output is a pure function of the input, so the
// same model description always yields the same bytes.

export type GgufValue =
  | { type: 'u32'; value: number }
  | { type: 'f32'; value: number }
  | { type: 'bool'; value: boolean }
  | { type: 'string'; value: string }
  | { type: 'string[]'; value: string[] }
  | { type: 'i32[]'; value: number[] }
  | { type: 'f32[]'; value: number[] };

export interface GgufTensor {
  name: string;
  /** llama.cpp order: fastest-varying dimension first (columns, then rows). */
  shape: number[];
  data: Float32Array;
}

const ALIGNMENT = 32;
const VALUE_TYPE = { u32: 4, i32: 5, f32: 6, bool: 7, string: 8, array: 9 } as const;
const GGML_TYPE_F32 = 0;

class ByteSink {
  private chunks: Buffer[] = [];
  length = 0;

  push(buf: Buffer): void {
    this.chunks.push(buf);
    this.length += buf.length;
  }
  u32(n: number): void {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(n);
    this.push(b);
  }
  i32(n: number): void {
    const b = Buffer.alloc(4);
    b.writeInt32LE(n);
    this.push(b);
  }
  u64(n: number): void {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(n));
    this.push(b);
  }
  f32(n: number): void {
    const b = Buffer.alloc(4);
    b.writeFloatLE(n);
    this.push(b);
  }
  string(s: string): void {
    const bytes = Buffer.from(s, 'utf8');
    this.u64(bytes.length);
    this.push(bytes);
  }
  padTo(alignment: number): void {
    const rem = this.length % alignment;
    if (rem !== 0) this.push(Buffer.alloc(alignment - rem));
  }
  toBuffer(): Buffer {
    return Buffer.concat(this.chunks, this.length);
  }
}

function writeValue(out: ByteSink, v: GgufValue): void {
  switch (v.type) {
    case 'u32': out.u32(VALUE_TYPE.u32); out.u32(v.value); return;
    case 'f32': out.u32(VALUE_TYPE.f32); out.f32(v.value); return;
    case 'bool': out.u32(VALUE_TYPE.bool); out.push(Buffer.from([v.value ? 1 : 0])); return;
    case 'string': out.u32(VALUE_TYPE.string); out.string(v.value); return;
    case 'string[]':
      out.u32(VALUE_TYPE.array); out.u32(VALUE_TYPE.string); out.u64(v.value.length);
      for (const s of v.value) out.string(s);
      return;
    case 'i32[]':
      out.u32(VALUE_TYPE.array); out.u32(VALUE_TYPE.i32); out.u64(v.value.length);
      for (const n of v.value) out.i32(n);
      return;
    case 'f32[]':
      out.u32(VALUE_TYPE.array); out.u32(VALUE_TYPE.f32); out.u64(v.value.length);
      for (const n of v.value) out.f32(n);
      return;
  }
}

export function encodeGguf(metadata: Record<string, GgufValue>, tensors: GgufTensor[]): Buffer {
  const out = new ByteSink();
  out.push(Buffer.from('GGUF', 'ascii'));
  out.u32(3);
  out.u64(tensors.length);
  out.u64(Object.keys(metadata).length);
  for (const [key, value] of Object.entries(metadata)) {
    out.string(key);
    writeValue(out, value);
  }
  let offset = 0;
  for (const t of tensors) {
    const elements = t.shape.reduce((a, b) => a * b, 1);
    if (elements !== t.data.length) throw new Error(`tensor ${t.name}: shape ${t.shape} does not hold ${t.data.length} values`);
    out.string(t.name);
    out.u32(t.shape.length);
    for (const d of t.shape) out.u64(d);
    out.u32(GGML_TYPE_F32);
    out.u64(offset);
    offset += Math.ceil((t.data.byteLength) / ALIGNMENT) * ALIGNMENT;
  }
  out.padTo(ALIGNMENT);
  for (const t of tensors) {
    out.push(Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
    out.padTo(ALIGNMENT);
  }
  return out.toBuffer();
}
