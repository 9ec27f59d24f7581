package heap

// ChunkSize is the size of the chunks Stats.Chunks counts, for callers that
// report bytes.
const ChunkSize = chunkSize
