/* The fragmentation workload of TestHeldFragmentationAgainstGlibc, on
 * glibc's malloc: the same sizes, in the same order, as the Go side
 * (TestHeldFragmentationChild in held_frag_linux_test.go). Prints "live1 rss1 live2 rss2": the
 * bytes live and the resident bytes added after filling the slots, and
 * again after churning them. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

static uint64_t x = 88172645463325252ULL;
static uint64_t next(void) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x; }

static size_t size_of(uint64_t r) {
	uint64_t k = r % 100, v = r >> 8;
	if (k < 60) return 16 + v % 240;
	if (k < 90) return 256 + v % 3840;
	if (k < 99) return 4096 + v % 28672;
	return 32768 + v % 229376;
}

static long rss(void) {
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
	if (f) fclose(f);
	return kb * 1024;
}

int main(int argc, char **argv) {
	/* Resident bytes in 4 KiB pages whatever the THP mode: with "always",
	 * they would measure the page size, not fragmentation. */
	prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
	size_t slots = argc > 1 ? strtoul(argv[1], 0, 10) : 16384, churn = argc > 2 ? strtoul(argv[2], 0, 10) : 65536;
	void **p = calloc(slots, sizeof *p);
	size_t *sz = calloc(slots, sizeof *sz), live = 0;
	memset(p, 0, slots * sizeof *p); memset(sz, 0, slots * sizeof *sz);
	long base = rss();
	for (size_t i = 0; i < slots; i++) {
		sz[i] = size_of(next());
		p[i] = malloc(sz[i]);
		memset(p[i], 1, sz[i]);
		live += sz[i];
	}
	long rss1 = rss() - base;
	size_t live1 = live;
	for (size_t n = 0; n < churn; n++) {
		size_t i = next() % slots;
		free(p[i]);
		live -= sz[i];
		sz[i] = size_of(next());
		p[i] = malloc(sz[i]);
		memset(p[i], 1, sz[i]);
		live += sz[i];
	}
	printf("%zu %ld %zu %ld\n", live1, rss1, live, rss() - base);
	return 0;
}
