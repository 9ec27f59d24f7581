// Package cgroup reads the memory limits the kernel's control groups put on
// this process: cgroup v2 memory.max and memory.high, cgroup v1
// memory.limit_in_bytes, of the process's own cgroup and every ancestor up
// to the hierarchy's mount (an ancestor's limit binds too), and reports the
// one that leaves the least room (its limit less its usage, which at an
// ancestor counts sibling groups too), with the file it came from and that
// cgroup's usage. Limits and usage change while a process runs: Memory
// reads them again at each call.
//
// Locked pages count against a memory cgroup and cannot be reclaimed, so a
// process pinning past its cgroup's limit is killed by the OOM killer, not
// refused with ENOMEM: the pinned-bytes limit must know this one. Containers
// (Docker, Kubernetes, systemd services) are where that happens, and there
// RLIMIT_MEMLOCK often does not bind (root, CAP_IPC_LOCK,
// --ulimit memlock=-1).
//
// Only files are read: /proc/self/cgroup, /proc/self/mountinfo and the
// limit files under each mount. MemoryAt reads the same below another
// root, which is how the tests feed it fixture trees. A missing or odd file
// is "no limit found", never an error: most machines have no limit.
package cgroup
