// Baseline for pinned's BenchmarkLookup: the lookup LLVM's
// PinnedAllocationMapTy does (std::set ordered by host start, upper_bound
// then one step back, under a std::shared_mutex), over N regions of 4 KiB,
// 8 KiB apart, visited in the same xorshift order. ns/op is wall time over
// all lookups of all threads, as in the Go benchmark.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <thread>
#include <vector>

struct Entry {
  uintptr_t host, dev;
  size_t size;
  mutable size_t refs;
  bool external;
};
struct Less {
  bool operator()(const Entry &a, const Entry &b) const { return a.host < b.host; }
};

struct Map {
  std::set<Entry, Less> set;
  mutable std::shared_mutex mu;
  uintptr_t lookup(uintptr_t p) const {
    std::shared_lock<std::shared_mutex> l(mu);
    auto it = set.upper_bound(Entry{p, 0, 0, 0, false});
    if (it == set.begin())
      return 0;
    --it;
    if (p >= it->host + it->size)
      return 0;
    return it->dev + (p - it->host);
  }
};

static uint32_t next(uint32_t x) {
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return x;
}

int main(int argc, char **argv) {
  long ops = argc > 1 ? atol(argv[1]) : 4000000;
  const uintptr_t base = 0x7e0000000000, stride = 8192, region = 4096;
  for (int n : {10000, 1000000}) {
    Map m;
    for (int i = 0; i < n; i++)
      m.set.insert(Entry{base + i * stride, base + i * stride + 0x100000000000, region, 1, false});
    for (int g : {1, 2}) {
      std::vector<uintptr_t> sums(g * 8);
      auto work = [&](int w, long count) {
        uint32_t x = 2463534242u + w * 7919;
        uintptr_t acc = 0;
        for (long i = 0; i < count; i++) {
          x = next(x);
          acc += m.lookup(base + (((uint64_t)x * n) >> 32) * stride + 100);
        }
        sums[w * 8] = acc;
      };
      work(0, ops / 10); // warm up
      auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> ts;
      for (int w = 0; w < g; w++)
        ts.emplace_back(work, w, ops / g);
      for (auto &t : ts)
        t.join();
      double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
      for (auto s : sums)
        if (s == 1)
          return 1;
      printf("lookup/regions=%d/goroutines=%d %.1f\n", n, g, ns / ops);
    }
  }
  return 0;
}
