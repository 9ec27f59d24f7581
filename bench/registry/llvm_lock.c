// LLVM libomptarget 16: lock+unlock of a contained sub-range of one of N
// locked 4 KiB regions (llvm_omp_target_lock_mem / llvm_omp_target_unlock_mem
// on device 0, the host plugin with LIBOMPTARGET_NEXTGEN_PLUGINS=1). Same
// layout and visiting order as pinned's BenchmarkLockUnlockHit.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

void *llvm_omp_target_lock_mem(void *ptr, size_t size, int device_num);
void llvm_omp_target_unlock_mem(void *ptr, int device_num);

enum { STRIDE = 8192, REGION = 4096 };

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static uint32_t next(uint32_t x) {
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return x;
}

int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 2000000;
  int x = 0;
#pragma omp target map(tofrom : x)
  x = 1; // loads the offload image and initializes device 0
  if (x != 1) {
    fprintf(stderr, "target region did not run\n");
    return 1;
  }
  const int sizes[] = {100, 10000, 100000};
  for (int s = 0; s < 3; s++) {
    int n = sizes[s];
    // Really distinct 4 KiB ranges of one reservation, 8 KiB apart.
    char *base = mmap(NULL, (size_t)n * STRIDE, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
      perror("mmap");
      return 1;
    }
    for (int i = 0; i < n; i++)
      if (!llvm_omp_target_lock_mem(base + (size_t)i * STRIDE, REGION, 0)) {
        fprintf(stderr, "llvm_omp_target_lock_mem failed (LIBOMPTARGET_NEXTGEN_PLUGINS=1?)\n");
        return 1;
      }
    uintptr_t sink = 0;
    uint32_t r = 2463534242u;
    for (int pass = 0; pass < 2; pass++) { // pass 0 warms up
      long m = pass ? iters : iters / 10;
      double t0 = now();
      for (long i = 0; i < m; i++) {
        r = next(r);
        char *p = base + (((uint64_t)r * n) >> 32) * STRIDE + 64;
        sink += (uintptr_t)llvm_omp_target_lock_mem(p, 1024, 0);
        llvm_omp_target_unlock_mem(p, 0);
      }
      if (pass)
        printf("lockunlock/regions=%d %.1f\n", n, (now() - t0) / m);
    }
    if (!sink)
      return 1;
    for (int i = 0; i < n; i++)
      llvm_omp_target_unlock_mem(base + (size_t)i * STRIDE, 0);
    munmap(base, (size_t)n * STRIDE);
  }
  return 0;
}
