// Command gpuprobe asks a real CUDA driver the questions ompalloc's GPU
// code rests on and the documentation leaves open (issue 19), and writes
// the answers as JSON. It is part of the GPU bundle (scripts/gpu-check.sh
// probe), runs in minutes, needs no test binaries, and talks to libcuda
// through purego with the entry points internal/plugin/cuda bound (its one
// symbol table, through cuda.Bound):
//
//   - mixed_range_copy: a copy over a range half registered, half pageable
//   - adjacent_registrations_copy: a copy over two adjacent registrations
//   - shared_page_registrations: two registrations sharing one page
//   - portable_dtoh_async: a DtoH copy on another context's stream into a
//     PORTABLE registration, still running right after it was queued?
//   - release_while_busy: how long cuMemHostUnregister and cuMemFreeHost
//     take while another stream is busy, against idle
//   - caller_context: the thread's current context after an ompalloc call
//     on a thread that had another context current
//   - node_bandwidth: registered (ompalloc's pinned path) and driver-peak
//     (cuMemAllocHost) H2D bandwidth with the host buffer on the GPU's
//     NUMA node and on the farthest node
//
// Each answer records the driver's own result codes and times; a question
// that cannot be asked here (one GPU and no cuCtxCreate, one NUMA node)
// says why. The JSON file is rewritten after every question, so a run cut
// short keeps what it learnt. The project's fake libcuda answers too (the
// dry run checks the JSON), but only a real driver's answers settle
// anything.
package main
