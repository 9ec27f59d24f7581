// Package pinlimit decides the default cap on the bytes pinned allocators
// may lock, and says where it came from and what raises it.
//
// A process may really lock no more than the smallest of: RLIMIT_MEMLOCK,
// when it binds (finite, and no CAP_IPC_LOCK); its memory cgroup's limit
// (package cgroup), since locked pages are charged to the cgroup and cannot
// be reclaimed, so pinning past it is an OOM kill, not an error; and
// physical memory. The default is RLIMIT_MEMLOCK when it binds, else half of
// physical memory, and never more than half of the room the cgroup leaves
// (its limit less its usage, three quarters of that at most): the rest of
// the program needs memory of the same cgroup. The cgroup is the level of
// the process's own group and its ancestors that leaves the least room
// (package cgroup), and since limits and usage change at run time, ShareNow
// takes that share again whenever pinned memory grows by a chunk.
//
// The answer is a value (Default) that alloc uses as its limit and that
// `ompalloc info` prints, so both say the same thing.
package pinlimit
