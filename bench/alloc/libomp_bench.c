// libomp_bench: LLVM libomp's omp_alloc/omp_free timed case by case, under
// the names the Go benchmarks of ./kmp use, so that run.sh can print the two
// side by side.
//
// Build (run.sh does this):
//   clang-16 -O2 -fopenmp -L/usr/lib/llvm-16/lib -Wl,-rpath,/usr/lib/llvm-16/lib \
//       -o libomp_bench libomp_bench.c
// Usage: libomp_bench [-time SECONDS] [-runs N] [CASE-SUBSTRING]
//
// Each case is sized to take about -time seconds per run and run -runs
// times; the best (lowest) ns/op is printed, one "name ns/op" line per case.
// Lines starting with '#' are comments.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double run_seconds = 0.2;
static int runs = 5;

// sink keeps the compiler from reasoning the allocations away. Loops fold
// into a local and store once: two threads storing to one shared line on
// every iteration would measure cache-line ping-pong, not the allocator.
static volatile uintptr_t sink;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static omp_allocator_handle_t align64_alloc, pinned_alloc;

// Each case runs n units and returns the elapsed nanoseconds; ops_per_unit
// turns that into ns per reported operation.

// AllocFree/*: n pairs of omp_alloc(64)+omp_free on one thread.
static int64_t alloc_free(long n, omp_allocator_handle_t a, size_t size) {
  uintptr_t acc = 0;
  int64_t t0 = now_ns();
  for (long i = 0; i < n; i++) {
    void *p = omp_alloc(size, a);
    acc ^= (uintptr_t)p;
    omp_free(p, a);
  }
  int64_t t = now_ns() - t0;
  sink ^= acc;
  return t;
}

static int64_t case_default64(long n) { return alloc_free(n, omp_default_mem_alloc, 64); }
static int64_t case_align64(long n) { return alloc_free(n, align64_alloc, 64); }

// MixedBatch: one unit = 1024 allocations of 64, 80, ..., 176 bytes (cycling
// in 16-byte steps), then 1024 frees in allocation order.
enum { batch = 1024 };
static int64_t case_mixed(long n) {
  static void *ptrs[batch];
  uintptr_t acc = 0;
  int64_t t0 = now_ns();
  for (long u = 0; u < n; u++) {
    for (int i = 0; i < batch; i++)
      ptrs[i] = omp_alloc(64 + 16 * (size_t)(i % 8), omp_default_mem_alloc);
    for (int i = 0; i < batch; i++) {
      acc ^= (uintptr_t)ptrs[i];
      omp_free(ptrs[i], omp_default_mem_alloc);
    }
  }
  int64_t t = now_ns() - t0;
  sink ^= acc;
  return t;
}

// AllocFreeParallel2: two OpenMP threads each do n AllocFree/default-64
// pairs at the same time. The result is the wall time from the first start to
// the last finish divided by n: time per pair per thread, directly comparable
// with the one-thread case (equal when the two threads do not slow each other).
static int64_t case_parallel2(long n) {
  int64_t start[2], end[2];
  int team = 0;
#pragma omp parallel num_threads(2)
  {
    int me = omp_get_thread_num();
    if (me == 0)
      team = omp_get_num_threads();
#pragma omp barrier
    uintptr_t acc = 0;
    int64_t t0 = now_ns();
    for (long i = 0; i < n; i++) {
      void *p = omp_alloc(64, omp_default_mem_alloc);
      acc ^= (uintptr_t)p;
      omp_free(p, omp_default_mem_alloc);
    }
    int64_t t1 = now_ns();
    start[me] = t0;
    end[me] = t1;
#pragma omp atomic
    sink ^= acc;
  }
  if (team != 2) {
    // OMP_THREAD_LIMIT=1 or the like: refuse rather than report a one-thread
    // figure under a two-thread name.
    fprintf(stderr, "libomp_bench: AllocFreeParallel2 got %d threads, want 2\n", team);
    exit(1);
  }
  int64_t s = start[0] < start[1] ? start[0] : start[1];
  int64_t e = end[0] > end[1] ? end[0] : end[1];
  return e - s;
}

// PinnedAllocFree/1MiB: omp_alloc(1 MiB)+omp_free on an allocator with
// omp_atk_pinned=true.
static int64_t case_pinned(long n) { return alloc_free(n, pinned_alloc, 1 << 20); }

struct bench {
  const char *name;
  int64_t (*fn)(long n);
  long ops_per_unit;
};

static const struct bench benches[] = {
    {"AllocFree/default-64", case_default64, 1},
    {"AllocFree/align64-64", case_align64, 1},
    {"MixedBatch", case_mixed, batch},
    {"AllocFreeParallel2/default-64", case_parallel2, 1},
    {"PinnedAllocFree/1MiB", case_pinned, 1},
};

// measure sizes n so that one run takes about run_seconds, then returns the
// best ns/op of `runs` runs.
static double measure(const struct bench *b) {
  const int64_t target = (int64_t)(run_seconds * 1e9);
  long n = 1;
  int64_t t;
  for (;;) {
    t = b->fn(n);
    if (t >= target / 10 || n > (1L << 40))
      break;
    n *= (t < target / 1000) ? 100 : 2;
  }
  if (t > 0) {
    double scaled = (double)n * (double)target / (double)t;
    n = scaled < 1 ? 1 : (long)scaled;
  }
  double best = -1;
  for (int r = 0; r < runs; r++) {
    double ns = (double)b->fn(n) / ((double)n * (double)b->ops_per_unit);
    if (best < 0 || ns < best)
      best = ns;
  }
  return best;
}

static void usage(void) {
  fprintf(stderr, "usage: libomp_bench [-time SECONDS] [-runs N] [CASE-SUBSTRING]\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *filter = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-time") == 0 && i + 1 < argc) {
      run_seconds = atof(argv[++i]);
      if (run_seconds <= 0)
        usage();
    } else if (strcmp(argv[i], "-runs") == 0 && i + 1 < argc) {
      runs = atoi(argv[++i]);
      if (runs < 1)
        usage();
    } else if (argv[i][0] == '-') {
      usage();
    } else {
      filter = argv[i];
    }
  }

  omp_alloctrait_t align_traits[] = {{omp_atk_alignment, 64}};
  align64_alloc = omp_init_allocator(omp_default_mem_space, 1, align_traits);
  omp_alloctrait_t pinned_traits[] = {{omp_atk_pinned, omp_atv_true}};
  pinned_alloc = omp_init_allocator(omp_default_mem_space, 1, pinned_traits);
  if (align64_alloc == omp_null_allocator || pinned_alloc == omp_null_allocator) {
    fprintf(stderr, "libomp_bench: omp_init_allocator failed\n");
    return 1;
  }

  printf("# libomp_bench: LLVM libomp omp_alloc/omp_free, clang %s, best of %d runs of ~%.2g s\n",
         __clang_version__, runs, run_seconds);
  // libomp pins only through libomptarget's llvm_omp_target_lock_mem; say
  // whether it is there, since without it "pinned" is plain malloc.
  printf("# pinned: llvm_omp_target_lock_mem %s\n",
         dlsym(RTLD_DEFAULT, "llvm_omp_target_lock_mem") ? "present" : "absent (libomp pins nothing)");
  printf("# case ns/op\n");
  fflush(stdout);
  for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++) {
    if (filter && !strstr(benches[i].name, filter))
      continue;
    printf("%s %.2f\n", benches[i].name, measure(&benches[i]));
    fflush(stdout);
  }
  omp_destroy_allocator(align64_alloc);
  omp_destroy_allocator(pinned_alloc);
  return 0;
}
