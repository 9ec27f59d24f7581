// glibc_pair: malloc(SIZE) + free for N pairs, the C side of bench/icount
// (run.sh runs it under cachegrind at two N, as it does the Go cases).
// Built with -fno-builtin so that the compiler cannot drop the pair; the
// pointer goes through a volatile so the block is really handed out.
//
// Usage: glibc_pair SIZE N               (count mode: run N pairs, print nothing)
//        glibc_pair SIZE N time RUNS     (print the least ns per pair of RUNS runs)
//        glibc_pair SIZE N time RUNS mt  (the same with an idle second thread)
//
// mt: glibc skips its arena lock while a process has one thread, and a Go
// process always has several; so the 4 MiB pair, which takes the lock in
// malloc and in free (64 B stays in the thread's cache), reads about 11 ns
// alone and 29-35 ns with a second thread on this VM, as inside pair -ref.
//
// The same file built as a shared object (gcc -O2 -fno-builtin -shared
// -fPIC) exports glibc_pairs_ns, which the Go program pair loads with -ref
// to time glibc's pair in its own process, alternating with the Go case's
// runs on the same thread (see run.sh).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void *volatile sink;

// pairs runs n malloc+free pairs of size bytes; it returns 0, or -1 when a
// malloc failed (the caller says so: the program exits, the library
// function returns a negative time).
static int pairs(size_t size, long n) {
	for (long i = 0; i < n; i++) {
		void *p = malloc(size);
		if (p == NULL)
			return -1;
		sink = p;
		free(sink);
	}
	return 0;
}

// cpu_ns is the CPU time the calling thread has used, in ns: the clock the
// Go cases read too, so that a run the scheduler interrupted on a shared
// machine is not charged for the time other processes ran.
static double cpu_ns(void) {
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

// glibc_pairs_ns runs n pairs of size bytes, as the program does, and
// returns the thread CPU time per pair in ns, taken here, around the loop
// alone, so that the cost of the caller's call into C is not in it. It
// returns -1 when n < 1 or size is 0, -2 when a malloc failed.
double glibc_pairs_ns(size_t size, long n) {
	if (size == 0 || n < 1)
		return -1;
	double a = cpu_ns();
	if (pairs(size, n) != 0)
		return -2;
	return (cpu_ns() - a) / n;
}

// run is pairs for the program: a failed malloc ends it with status 1.
static void run(size_t size, long n) {
	if (pairs(size, n) != 0) {
		fprintf(stderr, "glibc_pair: malloc(%zu) failed\n", size);
		exit(1);
	}
}

// idle is the second thread of mode mt: it only makes the process
// multi-threaded.
static void *idle(void *arg) {
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

int main(int argc, char **argv) {
	int timed = (argc == 5 || argc == 6) && strcmp(argv[3], "time") == 0;
	if (argc != 3 && !(timed && (argc == 5 || strcmp(argv[5], "mt") == 0))) {
		fprintf(stderr, "usage: glibc_pair SIZE N [time RUNS [mt]]\n");
		return 2;
	}
	pthread_t t;
	if (argc == 6 && pthread_create(&t, NULL, idle, NULL) != 0) {
		fprintf(stderr, "glibc_pair: cannot start the second thread\n");
		return 1;
	}
	size_t size = strtoull(argv[1], NULL, 0);
	long n = strtol(argv[2], NULL, 0);
	if (size == 0 || n < 1) {
		fprintf(stderr, "glibc_pair: SIZE and N must be at least 1\n");
		return 2;
	}
	run(size, 1000); /* warm-up, as the Go cases do */
	if (argc == 3) {
		run(size, n);
		return 0;
	}
	long runs = strtol(argv[4], NULL, 0);
	double best = 1e300;
	for (long r = 0; r < runs; r++) {
		double a = cpu_ns();
		run(size, n);
		double ns = cpu_ns() - a;
		if (ns < best)
			best = ns;
	}
	printf("%.2f\n", best / n);
	return 0;
}
