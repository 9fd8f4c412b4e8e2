// The package (ioredis's own slot function) ships no types.
declare module 'cluster-key-slot' {
  /** The Redis Cluster hash slot of a key: CRC16 of its hash tag (the part in braces), or of the whole key, mod 16384. */
  export default function calculateSlot(key: string): number;
}
