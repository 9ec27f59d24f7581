// glibc_pair: malloc(SIZE) + free for N pairs, the C side of bench/icount
// (run.sh runs it under cachegrind at two N, as it does the Go cases).
// Built with -fno-builtin so that the compiler cannot drop the pair; the
// pointer goes through a volatile so the block is really handed out.
//
// Usage: glibc_pair SIZE N            (count mode: run N pairs, print nothing)
//        glibc_pair SIZE N time RUNS  (print the least ns per pair of RUNS runs)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void *volatile sink;

static void pairs(size_t size, long n) {
	for (long i = 0; i < n; i++) {
		void *p = malloc(size);
		if (p == NULL) {
			fprintf(stderr, "glibc_pair: malloc(%zu) failed\n", size);
			exit(1);
		}
		sink = p;
		free(sink);
	}
}

int main(int argc, char **argv) {
	if (argc != 3 && !(argc == 5 && strcmp(argv[3], "time") == 0)) {
		fprintf(stderr, "usage: glibc_pair SIZE N [time RUNS]\n");
		return 2;
	}
	size_t size = strtoull(argv[1], NULL, 0);
	long n = strtol(argv[2], NULL, 0);
	if (size == 0 || n < 1) {
		fprintf(stderr, "glibc_pair: SIZE and N must be at least 1\n");
		return 2;
	}
	pairs(size, 1000); /* warm-up, as the Go cases do */
	if (argc == 3) {
		pairs(size, n);
		return 0;
	}
	long runs = strtol(argv[4], NULL, 0);
	double best = 1e300;
	for (long r = 0; r < runs; r++) {
		struct timespec a, b;
		/* CPU time of this thread, as the Go cases measure theirs: a run
		   the scheduler interrupted is not charged for others' time. */
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
		pairs(size, n);
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
		double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
		if (ns < best)
			best = ns;
	}
	printf("%.2f\n", best / n);
	return 0;
}
