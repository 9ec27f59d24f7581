/*
 * fakecuda.c — a fake NVIDIA driver (libcuda.so.1) for tests without a GPU.
 *
 * It exports the driver-API symbols ompalloc binds, with the REAL ABI: CUresult
 * is int, CUdevice int, CUdeviceptr unsigned long long, contexts, streams and
 * events opaque pointers, the real _v2 symbol names and the real error codes.
 * The pre-_v2 names of functions that have a _v2 are exported as stubs that
 * fail with CUDA_ERROR_NOT_SUPPORTED, so binding the wrong version shows.
 *
 * What it simulates
 *   - Devices: FAKECUDA_DEVICES (default 2) devices named "Fake CUDA Device N",
 *     FAKECUDA_MEM_MB MiB each (default 16384), compute capability
 *     FAKECUDA_CC (default "9.0"). FAKECUDA_PROHIBITED=1,3 puts devices 1
 *     and 3 in compute mode PROHIBITED: cuDeviceGetAttribute(COMPUTE_MODE)
 *     says 2 and cuDevicePrimaryCtxRetain fails with CUDA_ERROR_UNKNOWN, while
 *     the other devices work. FAKECUDA_DEVICES=0: cuInit returns
 *     CUDA_ERROR_NO_DEVICE and every later call CUDA_ERROR_NOT_INITIALIZED.
 *     cuDriverGetVersion gives FAKECUDA_VERSION (default 12020).
 *     cuDeviceGetPCIBusId writes device N's entry of FAKECUDA_PCI_BUS_IDS
 *     ("0000:41:00.0,0000:C1:00.0", copied as given: the real driver writes
 *     upper-case hex); unset, or no entry for N, it fails with
 *     CUDA_ERROR_NOT_SUPPORTED, so that other tests see no node whatever the
 *     host's sysfs holds.
 *   - Contexts: one primary context per device (retain/release counted); each
 *     OS thread has a stack of current contexts, as in the driver
 *     (cuCtxPushCurrent_v2 / cuCtxPopCurrent_v2; cuCtxSetCurrent replaces
 *     the top). cuDevicePrimaryCtxSetFlags_v2 / cuDevicePrimaryCtxGetState
 *     keep the flags; fakecuda_ctx_flags_when_active says which were in force
 *     when the context was last activated. The last release
 *     resets the context, as cuDevicePrimaryCtxRelease documents: everything
 *     allocated or registered in it is gone (cuMemHostUnregister then says
 *     CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, pointer queries
 *     CUDA_ERROR_INVALID_VALUE), and it is not current-able until retained
 *     again (CUDA_ERROR_INVALID_CONTEXT). Memory, copy,
 *     stream and event creation calls without a current, retained context
 *     return CUDA_ERROR_INVALID_CONTEXT: a caller that forgets to make its
 *     context current on the calling thread fails here.
 *   - Device memory (cuMemAlloc_v2) is malloc-backed, but its addresses are
 *     fake: 0x0080000000000000 + (device << 48) + offset, which are not
 *     canonical addresses, so a host dereference of a device pointer faults.
 *   - Host memory the devices can reach (cuMemAllocHost_v2, cuMemHostAlloc,
 *     cuMemHostRegister_v2) has device address host + 0x0040000000000000 (also
 *     not canonical); copies also accept the host address itself, as unified
 *     addressing does. Managed memory (cuMemAllocManaged) is host memory whose
 *     device address is the host address.
 *   - Peers: FAKECUDA_PEER (default "all"; "none"; pairs "0-1,1-2") says which
 *     devices cuDeviceCanAccessPeer lets reach each other;
 *     cuCtxEnablePeerAccess enables one direction (a second time:
 *     CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED; an unreachable peer:
 *     CUDA_ERROR_PEER_ACCESS_UNSUPPORTED; a device already connected to
 *     FAKECUDA_MAX_PEERS others, default 8: CUDA_ERROR_TOO_MANY_PEERS) until
 *     cuCtxDisablePeerAccess or a context reset; cuMemcpyPeerAsync copies
 *     late like any async copy, device memory of the two contexts.
 *   - Registrations are process-wide, as in the driver: registering a range
 *     that overlaps a registered or driver-allocated pinned range returns
 *     CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED (712); unregistering an address
 *     that does not start a registration returns
 *     CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED (713). Registrations are checked
 *     per page: one sharing a page with another is refused (712) too. A
 *     copy whose host range is partly registered and partly pageable fails
 *     with CUDA_ERROR_INVALID_VALUE, as the reference says; so does one over
 *     two registrations unless FAKECUDA_SPAN_REGISTRATIONS=1. cuMemHostUnregister
 *     and cuMemFreeHost first wait for every stream (a device-wide
 *     synchronization). A registration never touches
 *     the memory (a PROT_NONE reservation can be registered). One call may
 *     register at most FAKECUDA_MAX_REGISTER_GB GiB (default 64); more fails
 *     with CUDA_ERROR_OUT_OF_MEMORY, like the failures reported for very large
 *     registrations on real hosts.
 *   - cuPointerGetAttribute needs a current context (else
 *     CUDA_ERROR_INVALID_CONTEXT) and answers CONTEXT, MEMORY_TYPE, DEVICE_POINTER,
 *     HOST_POINTER, DEVICE_ORDINAL, RANGE_START_ADDR and RANGE_SIZE (other
 *     attributes: CUDA_ERROR_NOT_SUPPORTED); an unknown pointer gives
 *     CUDA_ERROR_INVALID_VALUE. cuMemHostGetFlags answers for driver-allocated
 *     pinned memory only, as documented.
 *   - Streams: each has a worker thread that performs its async copies LATE:
 *     it sleeps FAKECUDA_COPY_DELAY_US microseconds (default 200) before each
 *     copy and reads the source only then, so a host buffer reused before the
 *     copy ran is caught. cuStreamQuery gives CUDA_ERROR_NOT_READY while work
 *     is pending. Events complete when the worker reaches them.
 *     cuStreamDestroy_v2 returns at once: the handle is gone, the queued
 *     copies still run afterwards.
 *   - The legacy default stream, one per context, as the driver's "API
 *     synchronization behavior" page describes it: synchronous
 *     cuMemcpyDtoD_v2 returns at once and leaves the copy on the legacy
 *     stream; synchronous cuMemcpyHtoD_v2 from pageable memory waits for the
 *     legacy stream, stages the source and leaves the DMA there; from pinned
 *     memory, and cuMemcpyDtoH_v2, it is done on return. Work left on the
 *     legacy stream completes FAKECUDA_LEGACY_DELAY_US microseconds (default
 *     20000) after it reaches the head of the stream, or at once when a
 *     thread waits for the stream (a later synchronous copy,
 *     cuStreamSynchronize(NULL)). Async copies and events on the NULL stream
 *     go to the legacy stream. Streams created with CU_STREAM_NON_BLOCKING do
 *     not wait for it (a copy there may read what the legacy stream has not
 *     written yet); blocking streams (flags 0) and the legacy stream wait for
 *     each other. cuMemFree_v2, cuMemHostUnregister and cuMemFreeHost
 *     wait for every stream (a device-wide synchronization).
 *   - The stream-ordered allocator (cuDeviceGetDefaultMemPool, cuMemPoolCreate/
 *     Destroy, cuMemAllocFromPoolAsync, cuMemAllocAsync, cuMemFreeAsync,
 *     cuMemPoolSet/GetAttribute, cuMemPoolTrimTo): see its section at the end,
 *     which quotes the reference. FAKECUDA_NO_MEMPOOLS=1 makes the device an
 *     older one (attribute 115 is 0).
 *
 * Error injection (read at every call, so it may change while a process runs;
 * a changed value restarts the counts):
 *   FAKECUDA_FAIL=name[:N][=CODE][,name[:N][=CODE]...]
 *     name  the API name, with or without _v2 (cuMemHostRegister)
 *     N     fail only the Nth call counted from when the value was read
 *           (1 = the first); 0 or absent = fail every call
 *     CODE  the CUresult returned (decimal; default 999 CUDA_ERROR_UNKNOWN)
 *   e.g. FAKECUDA_FAIL=cuMemHostRegister:3=2,cuInit=100
 *   An injected failure changes nothing in the fake's state, except that
 *   an injected cuStreamSynchronize failure returns at once with the
 *   stream's work still pending (as a real error of an earlier launch may).
 *
 * Test hooks (not in the real driver):
 *   long fakecuda_calls(const char *name)  calls of name so far (without _v2)
 *   int  fakecuda_live(int kind)           live regions of a kind: 0 device,
 *                                          1 managed, 2 host-alloc, 3 registered,
 *                                          4 streams, 5 blocks pools hold
 *   long fakecuda_pool_misuse(void)        copies that touched pool memory before
 *                                          its allocation or after its free
 *                                          completed on the device
 *   long fakecuda_pool_allocs(int reused)  pool allocations served by a block
 *                                          the pool held already (1) or by a
 *                                          block newly reserved (0)
 *   int  fakecuda_ctx_refs(int dev)        references on dev's primary context
 *   long fakecuda_used(int dev)            bytes of dev's memory in use: cuMemAlloc
 *                                          blocks and what its pools reserved
 *                                          (-1: no such device)
 *   int  fakecuda_peer_enabled(int a, int b) whether a's context may access b's
 *   int  fakecuda_pool_access(int dev, int peer) whether every pool made on dev
 *                                          with cuMemPoolCreate grants peer
 *                                          access (cuMemPoolSetAccess); 0 when
 *                                          dev has none
 *   void fakecuda_gate(const char *name, int closed) closes (1) or opens (0) a
 *                                          gate in front of API name (without
 *                                          _v2): a call arriving at a closed
 *                                          gate waits there, holding no lock of
 *                                          the fake, until it opens, as
 *                                          cuMemHostRegister of a big range or a
 *                                          device-synchronizing
 *                                          cuMemHostUnregister/cuMemFreeHost may
 *                                          take milliseconds to seconds
 *                                          The gate named "stream" holds the
 *                                          device's work instead: while it is
 *                                          closed, every stream worker (legacy
 *                                          streams too) waits before performing
 *                                          its next queued copy, event record or
 *                                          event wait, so that work stays
 *                                          pending (cuStreamQuery and
 *                                          cuEventQuery say CUDA_ERROR_NOT_READY,
 *                                          synchronizing calls wait) for as long
 *                                          as the test wants. A device busy with
 *                                          other work does the same; the
 *                                          reference promises only the order of
 *                                          a stream's work, never when it
 *                                          completes. The gate named
 *                                          "stream:%p" (printf's %p of the
 *                                          CUstream) holds that stream's
 *                                          work alone
 *   void fakecuda_drain(void)              opens every gate and waits until every
 *                                          stream (destroyed ones too) has
 *                                          performed its queued work: a test's
 *                                          cleanup calls it before freeing host
 *                                          memory a copy may still read or write
 *   int  fakecuda_gated(void)              calls (and stream workers) waiting at
 *                                          a closed gate
 *   long fakecuda_event_misuse(void)       cuEventDestroy calls of an event a
 *                                          thread waits on in cuEventSynchronize
 *   unsigned fakecuda_last_event_flags(void) the flags of the last cuEventCreate
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define API __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct fake_ctx *CUcontext;
typedef struct fake_stream *CUstream;
typedef struct fake_event *CUevent;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_DEINITIALIZED = 4,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_NOT_READY = 600,
	CUDA_ERROR_ILLEGAL_ADDRESS = 700,
	CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217,
	CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
	CUDA_ERROR_PEER_ACCESS_NOT_ENABLED = 705,
	CUDA_ERROR_TOO_MANY_PEERS = 711,
	CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
	CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
	CUDA_ERROR_NOT_PERMITTED = 800,
	CUDA_ERROR_NOT_SUPPORTED = 801,
	CUDA_ERROR_UNKNOWN = 999,
};

static const struct {
	int code;
	const char *name, *text;
} errors[] = {
	{0, "CUDA_SUCCESS", "no error"},
	{1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	{2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	{3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	{4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
	{100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	{101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	{201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	{400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	{500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	{600, "CUDA_ERROR_NOT_READY", "device not ready"},
	{700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
	{217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported between these two devices"},
	{704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access is already enabled"},
	{705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", "peer access has not been enabled"},
	{711, "CUDA_ERROR_TOO_MANY_PEERS", "peer mapping resources exhausted"},
	{712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"},
	{713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"},
	{800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
	{801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	{999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

#define MAP_OFFSET 0x0040000000000000ULL /* host address -> device address */
#define DEV_BASE 0x0080000000000000ULL   /* device memory, + (dev << 48) */
#define MAX_DEVICES 32

/* K_NKINDS is also fakecuda_live's code for streams; K_POOL (5) is memory
   a stream-ordered pool reserved (cuMemAllocFromPoolAsync). */
enum { K_DEVICE, K_MANAGED, K_HOSTALLOC, K_REGISTERED, K_NKINDS, K_POOL };

struct pool_blk;

struct region {
	int kind, dev;
	unsigned flags;
	uintptr_t host;   /* host address (backing store for K_DEVICE) */
	CUdeviceptr dptr; /* device address */
	size_t size;
	struct pool_blk *blk; /* K_POOL: the pool's block */
	struct region *next;
};

struct fake_ctx {
	int dev, refs;
	struct fake_stream *legacy; /* the legacy default stream, made at first use */
};

struct op {
	void *dst;
	const void *src;
	size_t n;
	void *owned;           /* a staging copy of a pageable source, freed after the copy */
	struct fake_event *ev; /* non-NULL: an event record, not a copy */
	unsigned long long seq;
	struct fake_event *wait_ev; /* non-NULL: cuStreamWaitEvent until wait_ev->done >= wait_seq */
	unsigned long long wait_seq;
	int pool_op;               /* POOL_ALLOC, POOL_FREE: a stream-ordered allocator operation on pblk */
	struct pool_blk *pblk;
	unsigned long long pseq;
	struct pool_blk *dep_blk;  /* POOL_ALLOC by an internal dependency: wait until dep_blk's free dep_seq completed */
	unsigned long long dep_seq;
	struct pool_blk *use[2];   /* a copy: the pool blocks it reads or writes, */
	unsigned long long use_alloc[2], use_free[2]; /* and their counts when it was issued */
	struct op *next;
};

struct fake_stream {
	struct fake_ctx *ctx;
	unsigned flags;
	int legacy; /* the context's legacy default stream */
	int hurry;  /* legacy: threads waiting for it to drain */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct op *head, *tail;
	int busy, quit;
	pthread_t th;
	struct fake_stream *next;
	struct fake_stream *all; /* every stream ever made, destroyed ones too */
};

struct fake_event {
	unsigned long long recorded, done;
	int refs; /* the handle plus each pending record */
	unsigned flags;      /* cuEventCreate's: CU_EVENT_DISABLE_TIMING (2) */
	struct fake_ctx *ctx; /* the context current at cuEventCreate */
	int waiters;          /* threads in cuEventSynchronize on it */
	double done_ms;      /* CLOCK_MONOTONIC when the last record completed */
	struct fake_event *next;
};

/* g_mu guards everything below except what a stream's own mu guards. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_init, g_ndev;
static size_t g_mem;
static int g_ccmaj = 9, g_ccmin = 0;
static struct fake_ctx g_ctx[MAX_DEVICES];
static unsigned g_ctx_flags[MAX_DEVICES];    /* cuDevicePrimaryCtxSetFlags */
static int g_ctx_active_flags[MAX_DEVICES] = { /* the flags at activation, -1 never */
	[0 ... MAX_DEVICES - 1] = -1};
static size_t g_used[MAX_DEVICES];
static unsigned char g_peer[MAX_DEVICES][MAX_DEVICES]; /* [a][b]: context a may access b's memory */
static CUdeviceptr g_next[MAX_DEVICES];
static struct region *g_regions;
static struct fake_stream *g_streams; /* the live handles */
static struct fake_stream *g_all;     /* every stream and legacy stream, never freed */
static struct fake_event *g_events;
/* The thread's context stack (cuCtxPushCurrent_v2 / cuCtxPopCurrent_v2);
   its top is the current context, which cuCtxSetCurrent replaces. */
#define MAX_STACK 16
static __thread struct fake_ctx *t_stack[MAX_STACK];
static __thread int t_depth;
#define t_cur (t_depth > 0 ? t_stack[t_depth - 1] : (struct fake_ctx *)NULL)

static void drain_all_streams(void);
static void stream_wait_event_op(struct op *o);
static void drain_legacy(struct fake_ctx *ctx);
static int prohibited(CUdevice d);
static void pool_op_done(struct op *o);
static void pool_dep_wait(struct op *o);
static int pool_access_ok(CUdeviceptr d, int acc);
static void pool_use_check(struct op *o);
static void pool_note_use(struct op *o, const void *dst, const void *src);
static void pool_observe(struct fake_stream *s);
static void pool_reset(int dev);
static int pools_supported(void);

/* Events have their own lock: workers complete them without g_mu. */
static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cv = PTHREAD_COND_INITIALIZER;

/* ---- call counting and error injection ---- */

#define MAX_NAMES 96
static struct {
	char name[48];
	long calls;
} g_count[MAX_NAMES];
static int g_ncount;

#define MAX_FAIL 16
static char *g_fail_spec;
static struct {
	char name[48];
	long nth, seen;
	int code;
} g_fail[MAX_FAIL];
static int g_nfail;

static void base_name(char *dst, size_t cap, const char *src, size_t n) {
	if (n >= cap)
		n = cap - 1;
	memcpy(dst, src, n);
	dst[n] = 0;
	size_t l = strlen(dst);
	if (l > 3 && strcmp(dst + l - 3, "_v2") == 0)
		dst[l - 3] = 0;
}

static void parse_fail(const char *spec) {
	free(g_fail_spec);
	g_fail_spec = spec ? strdup(spec) : NULL;
	g_nfail = 0;
	if (!spec)
		return;
	const char *p = spec;
	while (*p && g_nfail < MAX_FAIL) {
		const char *end = strchr(p, ',');
		if (!end)
			end = p + strlen(p);
		size_t len = strcspn(p, ":=,");
		if (p + len > end)
			len = end - p;
		if (len > 0) {
			base_name(g_fail[g_nfail].name, sizeof g_fail[0].name, p, len);
			g_fail[g_nfail].nth = 0;
			g_fail[g_nfail].seen = 0;
			g_fail[g_nfail].code = CUDA_ERROR_UNKNOWN;
			const char *q = p + len;
			if (q < end && *q == ':') {
				g_fail[g_nfail].nth = strtol(q + 1, (char **)&q, 10);
			}
			if (q < end && *q == '=') {
				g_fail[g_nfail].code = (int)strtol(q + 1, (char **)&q, 10);
			}
			g_nfail++;
		}
		p = *end ? end + 1 : end;
	}
}

/* Gates (fakecuda_gate): calls held before they do anything. */
#define MAX_GATES 8
static pthread_mutex_t g_gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_gate_cv = PTHREAD_COND_INITIALIZER;
static char g_gates[MAX_GATES][48];
static int g_ngates, g_gated;

static int gate_closed_locked(const char *name) {
	for (int i = 0; i < g_ngates; i++)
		if (strcmp(g_gates[i], name) == 0)
			return 1;
	return 0;
}

static int gate_closed(const char *name) {
	pthread_mutex_lock(&g_gate_mu);
	int c = gate_closed_locked(name);
	pthread_mutex_unlock(&g_gate_mu);
	return c;
}

static void gate_wait(const char *name) {
	pthread_mutex_lock(&g_gate_mu);
	if (gate_closed_locked(name)) {
		g_gated++;
		while (gate_closed_locked(name))
			pthread_cond_wait(&g_gate_cv, &g_gate_mu);
		g_gated--;
	}
	pthread_mutex_unlock(&g_gate_mu);
}

API void fakecuda_gate(const char *name, int closed) {
	pthread_mutex_lock(&g_gate_mu);
	for (int i = 0; i < g_ngates; i++) {
		if (strcmp(g_gates[i], name) == 0) {
			memmove(g_gates[i], g_gates[g_ngates - 1], sizeof g_gates[0]);
			g_ngates--;
			break;
		}
	}
	if (closed && g_ngates < MAX_GATES)
		snprintf(g_gates[g_ngates++], sizeof g_gates[0], "%s", name);
	pthread_cond_broadcast(&g_gate_cv);
	pthread_mutex_unlock(&g_gate_mu);
}

API void fakecuda_drain(void) {
	pthread_mutex_lock(&g_gate_mu);
	g_ngates = 0;
	pthread_cond_broadcast(&g_gate_cv);
	pthread_mutex_unlock(&g_gate_mu);
	drain_all_streams();
}

API int fakecuda_gated(void) {
	pthread_mutex_lock(&g_gate_mu);
	int n = g_gated;
	pthread_mutex_unlock(&g_gate_mu);
	return n;
}

/* enter counts a call of name and returns the injected error, if any, after
 * waiting at name's gate while it is closed. */
static CUresult enter(const char *name) {
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&g_mu);
	int i;
	for (i = 0; i < g_ncount; i++)
		if (strcmp(g_count[i].name, name) == 0)
			break;
	if (i == g_ncount && g_ncount < MAX_NAMES) {
		snprintf(g_count[i].name, sizeof g_count[i].name, "%s", name);
		g_ncount++;
	}
	if (i < MAX_NAMES)
		g_count[i].calls++;
	const char *spec = getenv("FAKECUDA_FAIL");
	if ((spec == NULL) != (g_fail_spec == NULL) || (spec && strcmp(spec, g_fail_spec) != 0))
		parse_fail(spec);
	for (int j = 0; j < g_nfail; j++) {
		if (strcmp(g_fail[j].name, name) != 0)
			continue;
		g_fail[j].seen++;
		if (g_fail[j].nth == 0 || g_fail[j].seen == g_fail[j].nth)
			r = g_fail[j].code;
	}
	pthread_mutex_unlock(&g_mu);
	gate_wait(name);
	return r;
}

#define ENTER(name)                          \
	do {                                     \
		CUresult e_ = enter(name);           \
		if (e_ != CUDA_SUCCESS)              \
			return e_;                       \
	} while (0)

API long fakecuda_calls(const char *name) {
	char b[48];
	base_name(b, sizeof b, name, strlen(name));
	long n = 0;
	pthread_mutex_lock(&g_mu);
	for (int i = 0; i < g_ncount; i++)
		if (strcmp(g_count[i].name, b) == 0)
			n = g_count[i].calls;
	pthread_mutex_unlock(&g_mu);
	return n;
}

/* fakecuda_ctx_refs: references on device dev's primary context. */
API int fakecuda_ctx_refs(int dev) {
	pthread_mutex_lock(&g_mu);
	int n = dev >= 0 && dev < g_ndev ? g_ctx[dev].refs : -1;
	pthread_mutex_unlock(&g_mu);
	return n;
}

API long fakecuda_used(int dev) {
	pthread_mutex_lock(&g_mu);
	long n = dev >= 0 && dev < g_ndev ? (long)g_used[dev] : -1;
	pthread_mutex_unlock(&g_mu);
	return n;
}

API int fakecuda_live(int kind) {
	int n = 0;
	pthread_mutex_lock(&g_mu);
	if (kind == K_NKINDS) {
		for (struct fake_stream *s = g_streams; s; s = s->next)
			n++;
	} else {
		for (struct region *r = g_regions; r; r = r->next)
			if (r->kind == kind)
				n++;
	}
	pthread_mutex_unlock(&g_mu);
	return n;
}

/* ---- helpers ---- */

static long env_long(const char *name, long def) {
	const char *v = getenv(name);
	if (!v || !*v)
		return def;
	char *end;
	long x = strtol(v, &end, 10);
	return *end ? def : x;
}

/* ready: initialised (call with g_mu held or not; g_init only grows). */
static CUresult ready(void) { return g_init ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED; }

static CUresult need_ctx(void) {
	if (!g_init)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!t_cur || t_cur->refs <= 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	return CUDA_SUCCESS;
}

static int valid_dev(CUdevice d) { return d >= 0 && d < g_ndev; }

static int is_pinned_host(const struct region *r) { return r->kind == K_HOSTALLOC || r->kind == K_REGISTERED; }

/* find_host: the pinned host region (or managed) holding host address p. */
static struct region *find_host(uintptr_t p) {
	for (struct region *r = g_regions; r; r = r->next)
		if ((is_pinned_host(r) || r->kind == K_MANAGED) && p >= r->host && p - r->host < r->size)
			return r;
	return NULL;
}

/* find_dev: the region whose device range holds device address d. */
static struct region *find_dev(CUdeviceptr d) {
	for (struct region *r = g_regions; r; r = r->next)
		if (d >= r->dptr && d - r->dptr < r->size)
			return r;
	return NULL;
}

/* resolve maps [d, d+n) in the device's view to host-visible memory. Unified
   addressing: a host address of pinned or managed memory is accepted too. */
static CUresult resolve(CUdeviceptr d, size_t n, void **out) {
	struct region *r = find_dev(d);
	if (r) {
		if (n > r->size - (d - r->dptr))
			return CUDA_ERROR_INVALID_VALUE;
		*out = (void *)(r->host + (uintptr_t)(d - r->dptr));
		return CUDA_SUCCESS;
	}
	r = find_host((uintptr_t)d);
	if (r) {
		if (n > r->size - ((uintptr_t)d - r->host))
			return CUDA_ERROR_INVALID_VALUE;
		*out = (void *)(uintptr_t)d;
		return CUDA_SUCCESS;
	}
	return CUDA_ERROR_INVALID_VALUE;
}

static struct region *add_region(int kind, int dev, unsigned flags, uintptr_t host, CUdeviceptr dptr, size_t size) {
	struct region *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	r->kind = kind;
	r->dev = dev;
	r->flags = flags;
	r->host = host;
	r->dptr = dptr;
	r->size = size;
	r->next = g_regions;
	g_regions = r;
	return r;
}

static void remove_region(struct region *x) {
	for (struct region **pp = &g_regions; *pp; pp = &(*pp)->next)
		if (*pp == x) {
			*pp = x->next;
			free(x);
			return;
		}
}

static void *host_alloc(size_t n) {
	void *p = NULL;
	if (posix_memalign(&p, 4096, n ? n : 1) != 0)
		return NULL;
	memset(p, 0, n);
	return p;
}

static void sleep_us(long us) {
	if (us <= 0)
		return;
	struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

/* ---- initialisation, version, errors ---- */

API CUresult cuInit(unsigned int flags) {
	ENTER("cuInit");
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	CUresult r = CUDA_SUCCESS;
	if (!g_init) {
		long n = env_long("FAKECUDA_DEVICES", 2);
		if (n <= 0) {
			r = CUDA_ERROR_NO_DEVICE;
		} else {
			g_ndev = n > MAX_DEVICES ? MAX_DEVICES : (int)n;
			g_mem = (size_t)env_long("FAKECUDA_MEM_MB", 16384) << 20;
			const char *cc = getenv("FAKECUDA_CC");
			if (cc && sscanf(cc, "%d.%d", &g_ccmaj, &g_ccmin) != 2)
				g_ccmaj = 9, g_ccmin = 0;
			for (int i = 0; i < g_ndev; i++) {
				g_ctx[i].dev = i;
				g_next[i] = DEV_BASE + ((CUdeviceptr)i << 48) + 0x100000;
			}
			g_init = 1;
		}
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

API CUresult cuDriverGetVersion(int *v) {
	ENTER("cuDriverGetVersion");
	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
	*v = (int)env_long("FAKECUDA_VERSION", 12020);
	return CUDA_SUCCESS;
}

API CUresult cuGetErrorName(CUresult e, const char **s) {
	if (!s)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
		if (errors[i].code == e) {
			*s = errors[i].name;
			return CUDA_SUCCESS;
		}
	*s = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuGetErrorString(CUresult e, const char **s) {
	if (!s)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
		if (errors[i].code == e) {
			*s = errors[i].text;
			return CUDA_SUCCESS;
		}
	*s = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

/* ---- devices ---- */

API CUresult cuDeviceGetCount(int *n) {
	ENTER("cuDeviceGetCount");
	if (!n)
		return CUDA_ERROR_INVALID_VALUE;
	if (ready())
		return ready();
	*n = g_ndev;
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice *d, int ordinal) {
	ENTER("cuDeviceGet");
	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	if (ready())
		return ready();
	if (!valid_dev(ordinal))
		return CUDA_ERROR_INVALID_DEVICE;
	*d = ordinal;
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
	ENTER("cuDeviceGetName");
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (ready())
		return ready();
	if (!valid_dev(d))
		return CUDA_ERROR_INVALID_DEVICE;
	snprintf(name, (size_t)len, "Fake CUDA Device %d", d);
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d) {
	ENTER("cuDeviceGetPCIBusId");
	if (!id || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (ready())
		return ready();
	if (!valid_dev(d))
		return CUDA_ERROR_INVALID_DEVICE;
	const char *v = getenv("FAKECUDA_PCI_BUS_IDS");
	for (int i = 0; v && *v; i++) {
		const char *end = strchr(v, ',');
		size_t n = end ? (size_t)(end - v) : strlen(v);
		if (i == d) {
			snprintf(id, (size_t)len, "%.*s", (int)n, v);
			return CUDA_SUCCESS;
		}
		v = end ? end + 1 : v + n;
	}
	return CUDA_ERROR_NOT_SUPPORTED;
}

API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
	ENTER("cuDeviceTotalMem");
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (ready())
		return ready();
	if (!valid_dev(d))
		return CUDA_ERROR_INVALID_DEVICE;
	*bytes = g_mem;
	return CUDA_SUCCESS;
}

/* cuMemGetInfo_v2: "Returns in *total the total amount of memory available
   to the the current context. Returns in *free the amount of memory on the
   device that is free according to the OS." (CUDA driver API, Memory
   Management). It needs a current context, as the reference's "current
   context" says; free is the device's memory less what cuMemAlloc blocks
   and the stream-ordered pools' reservations hold. */
API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
	ENTER("cuMemGetInfo");
	if (!free_bytes || !total)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = need_ctx();
	if (r)
		return r;
	pthread_mutex_lock(&g_mu);
	*total = g_mem;
	*free_bytes = g_mem - g_used[t_cur->dev];
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
	ENTER("cuDeviceGetAttribute");
	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
	if (ready())
		return ready();
	if (!valid_dev(d))
		return CUDA_ERROR_INVALID_DEVICE;
	switch (attr) {
	case 16: /* MULTIPROCESSOR_COUNT */
		*v = 132;
		return CUDA_SUCCESS;
	case 19: /* CAN_MAP_HOST_MEMORY */
	case 41: /* UNIFIED_ADDRESSING */
	case 83: /* MANAGED_MEMORY */
		*v = 1;
		return CUDA_SUCCESS;
	case 20: /* COMPUTE_MODE: CU_COMPUTEMODE_DEFAULT 0, PROHIBITED 2 */
		*v = prohibited(d) ? 2 : 0;
		return CUDA_SUCCESS;
	case 75: /* COMPUTE_CAPABILITY_MAJOR */
		*v = g_ccmaj;
		return CUDA_SUCCESS;
	case 76: /* COMPUTE_CAPABILITY_MINOR */
		*v = g_ccmin;
		return CUDA_SUCCESS;
	case 115: /* MEMORY_POOLS_SUPPORTED: 0 with FAKECUDA_NO_MEMPOOLS=1, as an older driver */
		*v = pools_supported();
		return CUDA_SUCCESS;
	}
	return CUDA_ERROR_INVALID_VALUE;
}

/* ---- contexts ---- */

/* reset_ctx: the last cuDevicePrimaryCtxRelease resets the primary context,
   which "destroys all allocations" made in it (cuDevicePrimaryCtxReset):
   device and managed memory, pinned host allocations and host
   registrations. Host memory is not freed (the program may still touch its
   pages; the real driver would unmap them) but no longer pinned or known. */
static void reset_ctx(int dev) {
	pool_reset(dev);
	pthread_mutex_lock(&g_mu);
	for (int i = 0; i < MAX_DEVICES; i++)
		g_peer[dev][i] = g_peer[i][dev] = 0;
	for (struct region **pp = &g_regions; *pp;) {
		struct region *x = *pp;
		if (x->dev != dev) {
			pp = &x->next;
			continue;
		}
		if (x->kind == K_DEVICE) {
			g_used[dev] -= x->size;
			free((void *)x->host);
		}
		*pp = x->next;
		free(x);
	}
	pthread_mutex_unlock(&g_mu);
}

/* prohibited: device d is in compute mode PROHIBITED (FAKECUDA_PROHIBITED,
   a comma-separated list of ordinals): no context can be made on it. */
static int prohibited(CUdevice d) {
	const char *v = getenv("FAKECUDA_PROHIBITED");
	while (v && *v) {
		char *end;
		long x = strtol(v, &end, 10);
		if (end == v)
			break;
		if (x == d)
			return 1;
		v = *end == ',' ? end + 1 : end;
	}
	return 0;
}

API CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
	ENTER("cuDevicePrimaryCtxRetain");
	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	if (ready())
		return ready();
	if (!valid_dev(d))
		return CUDA_ERROR_INVALID_DEVICE;
	if (prohibited(d))
		return CUDA_ERROR_UNKNOWN; /* what the driver answers in PROHIBITED mode */
	pthread_mutex_lock(&g_mu);
	if (g_ctx[d].refs++ == 0)
		g_ctx_active_flags[d] = (int)g_ctx_flags[d];
	*c = &g_ctx[d];
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
	ENTER("cuDevicePrimaryCtxRelease");
	if (ready())
		return ready();
	if (!valid_dev(d))
		return CUDA_ERROR_INVALID_DEVICE;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&g_mu);
	if (g_ctx[d].refs <= 0)
		r = CUDA_ERROR_INVALID_CONTEXT;
	else
		g_ctx[d].refs--;
	int gone = r == CUDA_SUCCESS && g_ctx[d].refs == 0;
	pthread_mutex_unlock(&g_mu);
	if (gone) { /* the context is reset: its work completes, then its memory goes */
		drain_legacy(&g_ctx[d]);
		reset_ctx(d);
	}
	return r;
}

/* cuCtxSetCurrent: "If there exists a CUDA context stack on the calling CPU
   thread, this will replace the top of that stack with ctx. If ctx is NULL
   then this will be equivalent to popping the top of the calling CPU
   thread's CUDA context stack (or a no-op if the calling CPU thread's CUDA
   context stack is empty)." (CUDA Driver API, Context Management) */
API CUresult cuCtxSetCurrent(CUcontext c) {
	ENTER("cuCtxSetCurrent");
	if (ready())
		return ready();
	if (c && (c < &g_ctx[0] || c >= &g_ctx[g_ndev]))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!c) {
		if (t_depth > 0)
			t_depth--;
	} else if (t_depth == 0) {
		t_stack[t_depth++] = c;
	} else {
		t_stack[t_depth - 1] = c;
	}
	return CUDA_SUCCESS;
}

/* cuCtxPushCurrent_v2: "Pushes the given context ctx onto the CPU thread's
   stack of current contexts. The specified context becomes the CPU thread's
   current context, so all CUDA functions that operate on the current
   context are affected." */
API CUresult cuCtxPushCurrent_v2(CUcontext c) {
	ENTER("cuCtxPushCurrent");
	if (ready())
		return ready();
	if (!c || c < &g_ctx[0] || c >= &g_ctx[g_ndev] || c->refs <= 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (t_depth == MAX_STACK)
		return CUDA_ERROR_OUT_OF_MEMORY;
	t_stack[t_depth++] = c;
	return CUDA_SUCCESS;
}

/* cuCtxPopCurrent_v2: "Pops the current CUDA context from the CPU thread and
   passes back the old context handle in *pctx. [...] the previous current
   context, if any, is made current"; CUDA_ERROR_INVALID_CONTEXT without one. */
API CUresult cuCtxPopCurrent_v2(CUcontext *pc) {
	ENTER("cuCtxPopCurrent");
	if (ready())
		return ready();
	if (t_depth == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	struct fake_ctx *c = t_stack[--t_depth];
	if (pc)
		*pc = c;
	return CUDA_SUCCESS;
}

/* Primary context flags. cuDevicePrimaryCtxSetFlags_v2: "Sets the flags for
   the primary context on the device overwriting perviously set ones. The
   three LSBs of the flags parameter can be used to control how the OS
   thread, which owns the CUDA context at the time of an API call, interacts
   with the OS scheduler when waiting for results from the GPU. Only one of
   the scheduling flags can be set" (SPIN 1, YIELD 2, BLOCKING_SYNC 4; AUTO 0
   "uses a heuristic": it spins unless there are more contexts than CPUs).
   cuDevicePrimaryCtxGetState gives the flags and whether the context is
   active (retained). */
API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice d, unsigned int flags) {
	ENTER("cuDevicePrimaryCtxSetFlags");
	if (ready())
		return ready();
	if (!valid_dev(d))
		return CUDA_ERROR_INVALID_DEVICE;
	unsigned sched = flags & 7u;
	if ((flags & ~0x1Fu) || (sched != 0 && sched != 1 && sched != 2 && sched != 4))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	g_ctx_flags[d] = flags;
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active) {
	ENTER("cuDevicePrimaryCtxGetState");
	if (!flags || !active)
		return CUDA_ERROR_INVALID_VALUE;
	if (ready())
		return ready();
	if (!valid_dev(d))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&g_mu);
	*flags = g_ctx_flags[d];
	*active = g_ctx[d].refs > 0;
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

/* fakecuda_ctx_flags: the flags of dev's primary context (-1: no such device). */
API int fakecuda_ctx_flags(int dev) {
	pthread_mutex_lock(&g_mu);
	int f = dev >= 0 && dev < g_ndev ? (int)g_ctx_flags[dev] : -1;
	pthread_mutex_unlock(&g_mu);
	return f;
}

/* fakecuda_ctx_flags_when_active: the flags dev's primary context had when it
   was last made active (retained from zero references), -1 if never. The
   scheduling flags only take effect then. */
API int fakecuda_ctx_flags_when_active(int dev) {
	pthread_mutex_lock(&g_mu);
	int f = dev >= 0 && dev < g_ndev ? g_ctx_active_flags[dev] : -1;
	pthread_mutex_unlock(&g_mu);
	return f;
}

API CUresult cuCtxGetCurrent(CUcontext *c) {
	ENTER("cuCtxGetCurrent");
	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	if (ready())
		return ready();
	*c = t_cur;
	return CUDA_SUCCESS;
}

/* ---- peers ---- */

/* can_peer: FAKECUDA_PEER says which devices reach each other: "all" (the
   default, an NVLink node), "none" (PCIe without P2P), or pairs "0-1,2-3"
   (each both ways). A device never counts as its own peer. */
static int can_peer(int a, int b) {
	if (a == b)
		return 0;
	const char *v = getenv("FAKECUDA_PEER");
	if (!v || !*v || strcmp(v, "all") == 0)
		return 1;
	if (strcmp(v, "none") == 0)
		return 0;
	while (*v) {
		char *end;
		long x = strtol(v, &end, 10);
		if (end == v || *end != '-')
			break;
		long y = strtol(end + 1, &end, 10);
		if ((x == a && y == b) || (x == b && y == a))
			return 1;
		v = *end == ',' ? end + 1 : end;
	}
	return 0;
}

API CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer) {
	ENTER("cuDeviceCanAccessPeer");
	if (!can)
		return CUDA_ERROR_INVALID_VALUE;
	if (ready())
		return ready();
	if (!valid_dev(dev) || !valid_dev(peer))
		return CUDA_ERROR_INVALID_DEVICE;
	*can = can_peer(dev, peer);
	return CUDA_SUCCESS;
}

/* live_ctx: c is a primary context that is retained. */
static int live_ctx(CUcontext c) { return c >= &g_ctx[0] && c < &g_ctx[g_ndev] && c->refs > 0; }

/* connections: how many other devices dev has peer access with, either
   way. Called with g_mu held. */
static int connections(int dev) {
	int n = 0;
	for (int i = 0; i < g_ndev; i++)
		if (i != dev && (g_peer[dev][i] || g_peer[i][dev]))
			n++;
	return n;
}

/* cuCtxEnablePeerAccess: "Returns CUDA_ERROR_PEER_ACCESS_UNSUPPORTED if
   cuDeviceCanAccessPeer() indicates that the CUdevice of the current context
   cannot directly access memory from the CUdevice of peerContext. Returns
   CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED if direct access of peerContext
   from the current context has already been enabled. Returns
   CUDA_ERROR_TOO_MANY_PEERS if direct peer access is not possible because
   hardware resources required for peer access have been exhausted." The
   limits are those of the Programming Guide: "On non-NVSwitch enabled
   systems, each device can support a system-wide maximum of eight peer
   connections." FAKECUDA_MAX_PEERS (default 8) is that maximum here: a
   device connected (either way) to that many others refuses a new one. */
API CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
	ENTER("cuCtxEnablePeerAccess");
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = need_ctx();
	if (r)
		return r;
	long max = env_long("FAKECUDA_MAX_PEERS", 8);
	pthread_mutex_lock(&g_mu);
	int a = t_cur->dev;
	if (!live_ctx(peer))
		r = CUDA_ERROR_INVALID_CONTEXT;
	else if (!can_peer(a, peer->dev))
		r = CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
	else if (g_peer[a][peer->dev])
		r = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
	else if (!g_peer[peer->dev][a] && (connections(a) >= max || connections(peer->dev) >= max))
		r = CUDA_ERROR_TOO_MANY_PEERS;
	else
		g_peer[a][peer->dev] = 1;
	pthread_mutex_unlock(&g_mu);
	return r;
}

/* cuCtxDisablePeerAccess: "Returns CUDA_ERROR_PEER_ACCESS_NOT_ENABLED if
   direct peer access has not yet been enabled from peerContext to the
   current context. Returns CUDA_ERROR_INVALID_CONTEXT if there is no current
   context, or if peerContext is not a valid context." */
API CUresult cuCtxDisablePeerAccess(CUcontext peer) {
	ENTER("cuCtxDisablePeerAccess");
	CUresult r = need_ctx();
	if (r)
		return r;
	pthread_mutex_lock(&g_mu);
	if (!live_ctx(peer))
		r = CUDA_ERROR_INVALID_CONTEXT;
	else if (!g_peer[t_cur->dev][peer->dev])
		r = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
	else
		g_peer[t_cur->dev][peer->dev] = 0;
	pthread_mutex_unlock(&g_mu);
	return r;
}

/* fakecuda_peer_enabled: whether context a was given access to b's memory. */
API int fakecuda_peer_enabled(int a, int b) {
	pthread_mutex_lock(&g_mu);
	int v = a >= 0 && b >= 0 && a < MAX_DEVICES && b < MAX_DEVICES ? g_peer[a][b] : -1;
	pthread_mutex_unlock(&g_mu);
	return v;
}

/* ---- memory ---- */

API CUresult cuMemAlloc_v2(CUdeviceptr *d, size_t n) {
	ENTER("cuMemAlloc");
	if (!d || n == 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = need_ctx();
	if (r)
		return r;
	int dev = t_cur->dev;
	pthread_mutex_lock(&g_mu);
	if (n > g_mem - g_used[dev]) {
		pthread_mutex_unlock(&g_mu);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	void *back = malloc(n);
	if (!back) {
		pthread_mutex_unlock(&g_mu);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	memset(back, 0xA5, n); /* device memory starts with garbage, not zeroes */
	CUdeviceptr p = g_next[dev];
	g_next[dev] += (n + 0xFFF) & ~(CUdeviceptr)0xFFF; /* addresses are never reused */
	if (!add_region(K_DEVICE, dev, 0, (uintptr_t)back, p, n)) {
		free(back);
		pthread_mutex_unlock(&g_mu);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	g_used[dev] += n;
	*d = p;
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

API CUresult cuMemAllocManaged(CUdeviceptr *d, size_t n, unsigned int flags) {
	ENTER("cuMemAllocManaged");
	if (!d || n == 0 || (flags != 1 && flags != 2))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = need_ctx();
	if (r)
		return r;
	void *p = host_alloc(n);
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&g_mu);
	if (!add_region(K_MANAGED, t_cur->dev, flags, (uintptr_t)p, (uintptr_t)p, n)) {
		pthread_mutex_unlock(&g_mu);
		free(p);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*d = (uintptr_t)p;
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

API CUresult cuMemFree_v2(CUdeviceptr d) {
	ENTER("cuMemFree");
	CUresult r = need_ctx();
	if (r)
		return r;
	/* The Programming Guide (Stream-Ordered Memory Allocator, Introduction):
	   "Managing memory allocations using cudaMalloc and cudaFree causes the
	   GPU to synchronize across all executing CUDA streams." So cuMemFree
	   returns only once the work issued before it on every stream, of every
	   context, has completed: a caller holding a lock across it stalls
	   everyone behind that lock for as long as the GPU is busy. */
	drain_all_streams();
	pthread_mutex_lock(&g_mu);
	struct region *x = find_dev(d);
	if (!x || x->dptr != d || (x->kind != K_DEVICE && x->kind != K_MANAGED)) {
		pthread_mutex_unlock(&g_mu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (x->kind == K_DEVICE)
		g_used[x->dev] -= x->size;
	free((void *)x->host);
	remove_region(x);
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

#define PAGE 4096UL
static uintptr_t page_down(uintptr_t p) { return p & ~(PAGE - 1); }
static uintptr_t page_up(uintptr_t p) { return (p + PAGE - 1) & ~(PAGE - 1); }

/* overlaps_pinned: some pinned host region shares a page with [p, p+n).
   The driver pins whole pages ("Page-locks the memory range specified by p
   and bytesize"), and the reference promises nothing about two
   registrations sharing a page: here the second is refused as already
   registered (the GPU probe asks the real driver). */
static int overlaps_pinned(uintptr_t p, size_t n) {
	uintptr_t lo = page_down(p), hi = page_up(p + n);
	for (struct region *r = g_regions; r; r = r->next)
		if (is_pinned_host(r) && lo < page_up(r->host + r->size) && page_down(r->host) < hi)
			return 1;
	return 0;
}

static CUresult host_alloc_flags(void **pp, size_t n, unsigned flags) {
	if (!pp || n == 0 || (flags & ~7u))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = need_ctx();
	if (r)
		return r;
	void *p = host_alloc(n);
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&g_mu);
	if (!add_region(K_HOSTALLOC, t_cur->dev, flags, (uintptr_t)p, (uintptr_t)p + MAP_OFFSET, n)) {
		pthread_mutex_unlock(&g_mu);
		free(p);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_unlock(&g_mu);
	*pp = p;
	return CUDA_SUCCESS;
}

API CUresult cuMemAllocHost_v2(void **pp, size_t n) {
	ENTER("cuMemAllocHost");
	return host_alloc_flags(pp, n, 0);
}

API CUresult cuMemHostAlloc(void **pp, size_t n, unsigned int flags) {
	ENTER("cuMemHostAlloc");
	return host_alloc_flags(pp, n, flags);
}

API CUresult cuMemFreeHost(void *p) {
	ENTER("cuMemFreeHost");
	CUresult r = need_ctx();
	if (r)
		return r;
	drain_all_streams(); /* a device-wide synchronization: see drain_all_streams */
	pthread_mutex_lock(&g_mu);
	struct region *x = find_host((uintptr_t)p);
	if (!x || x->kind != K_HOSTALLOC || x->host != (uintptr_t)p) {
		pthread_mutex_unlock(&g_mu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	free(p);
	remove_region(x);
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

API CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned int flags) {
	ENTER("cuMemHostRegister");
	if (!p || n == 0 || (flags & ~0xFu))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = need_ctx();
	if (r)
		return r;
	if (n > ((size_t)env_long("FAKECUDA_MAX_REGISTER_GB", 64) << 30))
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&g_mu);
	if (overlaps_pinned((uintptr_t)p, n)) {
		pthread_mutex_unlock(&g_mu);
		return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	}
	if (!add_region(K_REGISTERED, t_cur->dev, flags, (uintptr_t)p, (uintptr_t)p + MAP_OFFSET, n))
		r = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&g_mu);
	return r;
}

API CUresult cuMemHostUnregister(void *p) {
	ENTER("cuMemHostUnregister");
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = need_ctx();
	if (r)
		return r;
	drain_all_streams(); /* a device-wide synchronization: see drain_all_streams */
	pthread_mutex_lock(&g_mu);
	struct region *x = find_host((uintptr_t)p);
	if (!x || x->kind != K_REGISTERED || x->host != (uintptr_t)p)
		r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	else
		remove_region(x);
	pthread_mutex_unlock(&g_mu);
	return r;
}

API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned int flags) {
	ENTER("cuMemHostGetDevicePointer");
	if (!d || !p || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = need_ctx();
	if (r)
		return r;
	pthread_mutex_lock(&g_mu);
	struct region *x = find_host((uintptr_t)p);
	if (!x || !is_pinned_host(x))
		r = CUDA_ERROR_INVALID_VALUE;
	else
		*d = (uintptr_t)p + MAP_OFFSET;
	pthread_mutex_unlock(&g_mu);
	return r;
}

API CUresult cuMemHostGetFlags(unsigned int *flags, void *p) {
	ENTER("cuMemHostGetFlags");
	if (!flags || !p)
		return CUDA_ERROR_INVALID_VALUE;
	if (ready())
		return ready();
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&g_mu);
	struct region *x = find_host((uintptr_t)p);
	if (!x || x->kind != K_HOSTALLOC)
		r = CUDA_ERROR_INVALID_VALUE;
	else
		*flags = x->flags;
	pthread_mutex_unlock(&g_mu);
	return r;
}

/* cuPointerGetAttribute answers in the current context: its documented
   results include CUDA_ERROR_INVALID_CONTEXT, and the driver gives it when
   the calling thread has no current context, so a caller must make one
   current first (as the plugin does for every call). */
API CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr ptr) {
	ENTER("cuPointerGetAttribute");
	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = need_ctx();
	if (r)
		return r;
	pthread_mutex_lock(&g_mu);
	int by_host = 0;
	struct region *x = find_dev(ptr);
	if (!x) {
		x = find_host((uintptr_t)ptr);
		by_host = 1;
	}
	if (!x) {
		pthread_mutex_unlock(&g_mu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	switch (attr) {
	case 1: /* CONTEXT */
		/* The Programming Guide (Stream-Ordered Memory Allocator, Pointer
		   Attributes): "Since stream-ordered allocations are not context
		   associated, querying CU_POINTER_ATTRIBUTE_CONTEXT will succeed
		   but return NULL in *data. The attribute
		   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL can be used to determine the
		   location of the allocation". */
		*(CUcontext *)data = x->kind == K_POOL ? NULL : &g_ctx[x->dev];
		break;
	case 2: /* MEMORY_TYPE: CU_MEMORYTYPE_HOST 1, DEVICE 2 */
		*(unsigned int *)data = is_pinned_host(x) ? 1 : 2;
		break;
	case 3: /* DEVICE_POINTER */
		*(CUdeviceptr *)data = by_host ? x->dptr + ((uintptr_t)ptr - x->host) : ptr;
		break;
	case 4: /* HOST_POINTER */
		if (x->kind == K_DEVICE || x->kind == K_POOL)
			r = CUDA_ERROR_INVALID_VALUE;
		else
			*(void **)data = (void *)(by_host ? (uintptr_t)ptr : x->host + (uintptr_t)(ptr - x->dptr));
		break;
	case 9: /* DEVICE_ORDINAL */
		*(int *)data = x->dev;
		break;
	case 11: /* RANGE_START_ADDR, in the space the pointer was given in */
		*(CUdeviceptr *)data = by_host ? x->host : x->dptr;
		break;
	case 12: /* RANGE_SIZE */
		*(size_t *)data = x->size;
		break;
	default:
		r = CUDA_ERROR_NOT_SUPPORTED;
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

/* ---- streams and copies ---- */

static int pending(struct fake_stream *s) { return s->head != NULL || s->busy; }

static void ev_complete(struct fake_event *e, unsigned long long seq) {
	pthread_mutex_lock(&ev_mu);
	if (seq > e->done) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		e->done = seq;
		e->done_ms = ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
	}
	if (--e->refs == 0)
		free(e);
	pthread_cond_broadcast(&ev_cv);
	pthread_mutex_unlock(&ev_mu);
}

/* wait_due: a legacy stream's copy runs FAKECUDA_LEGACY_DELAY_US (default
   20000) after it reaches the head, or at once when a thread waits for the
   stream (a synchronous copy, cuStreamSynchronize): the real driver promises
   nothing about when, only the order. Called and returns with s->mu held. */
static void wait_due(struct fake_stream *s) {
	long us = env_long("FAKECUDA_LEGACY_DELAY_US", 20000);
	struct timespec due;
	clock_gettime(CLOCK_REALTIME, &due);
	due.tv_sec += us / 1000000;
	due.tv_nsec += (us % 1000000) * 1000;
	if (due.tv_nsec >= 1000000000) {
		due.tv_sec++;
		due.tv_nsec -= 1000000000;
	}
	while (!s->hurry && !s->quit)
		if (pthread_cond_timedwait(&s->cv, &s->mu, &due) == ETIMEDOUT)
			break;
}

static void *worker(void *arg) {
	struct fake_stream *s = arg;
	long delay = env_long("FAKECUDA_COPY_DELAY_US", 200);
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->head && !s->quit)
			pthread_cond_wait(&s->cv, &s->mu);
		if (!s->head)
			break;
		if (gate_closed("stream")) {
			/* The device is busy (fakecuda_gate("stream", 1)): the op
			   stays queued, so the stream and its events stay pending. */
			pthread_mutex_unlock(&s->mu);
			gate_wait("stream");
			pthread_mutex_lock(&s->mu);
			continue;
		}
		char own[48]; /* this stream alone held: "stream:%p" of its handle */
		snprintf(own, sizeof own, "stream:%p", (void *)s);
		if (gate_closed(own)) {
			pthread_mutex_unlock(&s->mu);
			gate_wait(own);
			pthread_mutex_lock(&s->mu);
			continue;
		}
		struct op *o = s->head;
		if (o->ev) {
			s->head = o->next;
			if (!s->head)
				s->tail = NULL;
			/* Under the stream's lock: whoever sees the event complete
			   also sees the stream without it. */
			ev_complete(o->ev, o->seq);
			free(o);
			pthread_cond_broadcast(&s->cv);
			continue;
		}
		if (o->pool_op && o->dep_blk) {
			/* An internal dependency: the op stays at the head (the
			   stream pending) until the other stream's free is done. */
			pthread_mutex_unlock(&s->mu);
			pool_dep_wait(o);
			pthread_mutex_lock(&s->mu);
			o->dep_blk = NULL;
			continue;
		}
		if (o->pool_op) { /* a stream-ordered allocation or free reached */
			/* Under the stream's lock (s->mu, then g_mu, as pool_enqueue):
			   whoever can reuse a freed block also sees the stream without
			   the free. cuStreamQuery: "Returns CUDA_SUCCESS if all
			   operations in the stream specified by hStream have
			   completed"; a free that reuse counts as performed
			   (REUSE_ALLOW_OPPORTUNISTIC: "already completed frees") has
			   completed. Done outside the lock, a host that got the block
			   back could still see the stream busy (issue 28 item 9). */
			s->head = o->next;
			if (!s->head)
				s->tail = NULL;
			pool_op_done(o);
			free(o);
			pthread_cond_broadcast(&s->cv);
			continue;
		}
		if (o->wait_ev) { /* cuStreamWaitEvent: later work waits, the caller did not */
			s->busy = 1;
			s->head = o->next;
			if (!s->head)
				s->tail = NULL;
			pthread_mutex_unlock(&s->mu);
			stream_wait_event_op(o);
			pthread_mutex_lock(&s->mu);
			s->busy = 0;
			pthread_cond_broadcast(&s->cv);
			continue;
		}
		s->busy = 1;
		if (s->legacy)
			wait_due(s);
		s->head = o->next;
		if (!s->head)
			s->tail = NULL;
		pthread_mutex_unlock(&s->mu);
		if (!s->legacy)
			sleep_us(delay);
		pool_use_check(o);
		memmove(o->dst, o->src, o->n); /* the source is read only now */
		free(o->owned);
		free(o);
		pthread_mutex_lock(&s->mu);
		s->busy = 0;
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static void stream_wait(struct fake_stream *s) {
	pthread_mutex_lock(&s->mu);
	s->hurry++;
	pthread_cond_broadcast(&s->cv);
	while (pending(s))
		pthread_cond_wait(&s->cv, &s->mu);
	s->hurry--;
	pthread_mutex_unlock(&s->mu);
}

/* new_stream makes a stream with its worker; NULL when out of resources. */
static struct fake_stream *new_stream(struct fake_ctx *ctx, unsigned flags, int legacy) {
	struct fake_stream *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->ctx = ctx;
	s->flags = flags;
	s->legacy = legacy;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	if (pthread_create(&s->th, NULL, worker, s) != 0) {
		free(s);
		return NULL;
	}
	pthread_mutex_lock(&g_mu);
	s->all = g_all;
	g_all = s;
	pthread_mutex_unlock(&g_mu);
	return s;
}

/* legacy_of: the legacy default stream of ctx, made at first use. It is not
   in g_streams (it is no handle the caller created) and lives as long as the
   process, like the context's slot. */
static struct fake_stream *legacy_of(struct fake_ctx *ctx) {
	static pthread_mutex_t legacy_mu = PTHREAD_MUTEX_INITIALIZER;
	pthread_mutex_lock(&legacy_mu);
	pthread_mutex_lock(&g_mu);
	struct fake_stream *l = ctx->legacy;
	pthread_mutex_unlock(&g_mu);
	if (!l) {
		l = new_stream(ctx, 0, 1);
		pthread_mutex_lock(&g_mu);
		ctx->legacy = l;
		pthread_mutex_unlock(&g_mu);
	}
	pthread_mutex_unlock(&legacy_mu);
	return l;
}

/* drain_legacy waits for the legacy stream of ctx, if it has one. */
static void drain_legacy(struct fake_ctx *ctx) {
	pthread_mutex_lock(&g_mu);
	struct fake_stream *l = ctx ? ctx->legacy : NULL;
	pthread_mutex_unlock(&g_mu);
	if (l)
		stream_wait(l);
}

/* drain_all_streams waits for every stream of every context, destroyed ones
   still finishing their work included: a device-wide synchronization. The
   Programming Guide counts page-locked host memory operations among the
   implicit synchronizations ("Two commands from different streams cannot run
   concurrently if any one of the following operations is issued in-between
   them by the host thread: a page-locked host memory allocation, a device
   memory allocation, ..."), and cuMemHostUnregister / cuMemFreeHost are
   known to synchronize the device (which is why PyTorch caches pinned
   blocks): they return only after all work issued before them, on any
   stream, has completed. So do these here, which makes their cost visible
   (a caller holding a lock across them stalls everyone behind that lock).
   Streams are never freed (g_all), so the walk needs no lock held. */
static void drain_all_streams(void) {
	pthread_mutex_lock(&g_mu);
	struct fake_stream *head = g_all;
	pthread_mutex_unlock(&g_mu);
	for (struct fake_stream *x = head; x; x = x->all)
		stream_wait(x);
}

/* live_stream: s is a stream handle this driver created and not destroyed. */
static int live_stream(struct fake_stream *s) {
	int ok = 0;
	pthread_mutex_lock(&g_mu);
	for (struct fake_stream *x = g_streams; x; x = x->next)
		if (x == s)
			ok = 1;
	pthread_mutex_unlock(&g_mu);
	return ok;
}

/* is_null_stream: the legacy (0, 1) or per-thread (2) default stream. */
static int is_null_stream(CUstream s) { return (uintptr_t)s <= 2; }

API CUresult cuStreamCreate(CUstream *ps, unsigned int flags) {
	ENTER("cuStreamCreate");
	if (!ps || (flags & ~1u))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = need_ctx();
	if (r)
		return r;
	struct fake_stream *s = new_stream(t_cur, flags, 0);
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&g_mu);
	s->next = g_streams;
	g_streams = s;
	pthread_mutex_unlock(&g_mu);
	*ps = s;
	return CUDA_SUCCESS;
}

/* cuStreamDestroy_v2: "In case the device is still doing work in the stream
   hStream when cuStreamDestroy() is called, the function will return
   immediately and the resources associated with hStream will be released
   automatically once the device has completed all work in hStream." So the
   handle is gone at once and the worker finishes the queued copies later,
   reading and writing their memory after the call returned. */
API CUresult cuStreamDestroy_v2(CUstream s) {
	ENTER("cuStreamDestroy");
	if (ready())
		return ready();
	pthread_mutex_lock(&g_mu);
	struct fake_stream **pp = &g_streams;
	while (*pp && *pp != s)
		pp = &(*pp)->next;
	if (!*pp) {
		pthread_mutex_unlock(&g_mu);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	*pp = s->next;
	pthread_mutex_unlock(&g_mu);
	pthread_mutex_lock(&s->mu);
	s->quit = 1; /* the worker drains the queue, then exits */
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	pthread_detach(s->th);
	return CUDA_SUCCESS;
}

API CUresult cuStreamSynchronize(CUstream s) {
	CUresult e = enter("cuStreamSynchronize");
	if (e != CUDA_SUCCESS) {
		/* An injected failure returns at once, the stream's work still
		   pending. cuStreamSynchronize: "Waits until the device has
		   completed all operations in the stream [...]. Note that this
		   function may also return error codes from previous, asynchronous
		   launches." A failed wait promises nothing about the work: it may
		   still run (and read or write its memory) after the call, also
		   after cuStreamDestroy, which "will return immediately and the
		   resources associated with hStream will be released automatically
		   once the device has completed all work in hStream". A caller
		   that frees what the work uses on a failed wait is caught. */
		return e;
	}
	if (ready())
		return ready();
	if (is_null_stream(s)) {
		drain_legacy(t_cur);
		return CUDA_SUCCESS;
	}
	if (!live_stream(s))
		return CUDA_ERROR_INVALID_HANDLE;
	stream_wait(s);
	pool_observe(s);
	return CUDA_SUCCESS;
}

API CUresult cuStreamQuery(CUstream s) {
	ENTER("cuStreamQuery");
	if (ready())
		return ready();
	if (is_null_stream(s)) {
		if (!t_cur || !t_cur->legacy)
			return CUDA_SUCCESS;
		s = t_cur->legacy;
		pthread_mutex_lock(&s->mu);
		int p = pending(s);
		pthread_mutex_unlock(&s->mu);
		return p ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
	}
	if (!live_stream(s))
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&s->mu);
	int p = pending(s);
	pthread_mutex_unlock(&s->mu);
	return p ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

static void enqueue(struct fake_stream *s, struct op *o) {
	pthread_mutex_lock(&s->mu);
	if (s->tail)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* legacy_sync: a synchronous copy waits for the blocking streams of the
   current context, as work on the legacy default stream does. */
static void legacy_sync(void) {
	struct fake_stream *list[64];
	int n = 0;
	pthread_mutex_lock(&g_mu);
	for (struct fake_stream *x = g_streams; x && n < 64; x = x->next)
		if (x->ctx == t_cur && x->flags == 0)
			list[n++] = x;
	pthread_mutex_unlock(&g_mu);
	for (int i = 0; i < n; i++)
		stream_wait(list[i]);
}

static struct op *new_op(void *dst, const void *src, size_t n) {
	struct op *o = calloc(1, sizeof *o);
	if (o) {
		o->dst = dst;
		o->src = src;
		o->n = n;
	}
	return o;
}

/* HOST_* are host_span's answers for a range of host memory. */
enum { HOST_PAGEABLE, HOST_PINNED, HOST_MIXED, HOST_SPANS };

/* host_span: how [p, p+n) lies in host memory the driver knows (registered,
   allocated pinned, or managed): not at all (HOST_PAGEABLE), within one
   allocation or registration (HOST_PINNED), partly (HOST_MIXED), or wholly
   but over two or more of them (HOST_SPANS). Called with g_mu held. */
static int host_span(uintptr_t p, size_t n) {
	int regs = 0, gaps = 0;
	uintptr_t q = p, end = p + n;
	while (q < end) {
		struct region *r = find_host(q);
		if (r) {
			regs++;
			q = r->host + r->size;
			continue;
		}
		gaps = 1;
		uintptr_t next = end; /* the next known range after q */
		for (struct region *x = g_regions; x; x = x->next)
			if ((is_pinned_host(x) || x->kind == K_MANAGED) && x->host > q && x->host < next)
				next = x->host;
		q = next;
	}
	if (regs == 0)
		return HOST_PAGEABLE;
	if (gaps)
		return HOST_MIXED;
	return regs > 1 ? HOST_SPANS : HOST_PINNED;
}

/* check_host_side applies the note on every copy function of the driver
   API: "Memory regions requested must be either entirely registered with
   CUDA, or in the case of host pageable transfers, not registered at all.
   Memory regions spanning over allocations that are both registered and not
   registered with CUDA are not supported and will return
   CUDA_ERROR_INVALID_VALUE." A range over two registrations (adjacent
   cuMemHostRegister calls, the pieces of one large registration) is
   entirely registered, but nothing says one copy may cross from one into
   the other: refused the same way unless FAKECUDA_SPAN_REGISTRATIONS=1
   (the GPU probe asks the real driver). */
static CUresult check_host_side(const void *p, size_t n) {
	if (!p || n == 0)
		return CUDA_SUCCESS;
	pthread_mutex_lock(&g_mu);
	int span = host_span((uintptr_t)p, n);
	pthread_mutex_unlock(&g_mu);
	if (span == HOST_MIXED)
		return CUDA_ERROR_INVALID_VALUE;
	if (span == HOST_SPANS && env_long("FAKECUDA_SPAN_REGISTRATIONS", 0) == 0)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

/* pinned_src: [p, p+n) is page-locked or managed host memory. */
static int pinned_src(const void *p, size_t n) {
	pthread_mutex_lock(&g_mu);
	struct region *r = find_host((uintptr_t)p);
	int ok = r && n <= r->size - ((uintptr_t)p - r->host);
	pthread_mutex_unlock(&g_mu);
	return ok;
}

/* copy resolves both sides and performs the copy as the "API synchronization
   behavior" page of the driver documentation says:
     async, on a stream        enqueued; the worker reads the source late
                               (a blocking stream first waits for the
                               legacy stream, a non-blocking one does not)
     async, on the NULL stream enqueued on the context's legacy stream
     sync host-to-device       the legacy stream is drained first; from
                               pinned memory the copy is done on return,
                               from pageable memory the source is staged and
                               the DMA is left on the legacy stream
     sync device-to-host       done on return (after the legacy stream)
     sync device-to-device     no host-side synchronization: left on the
                               legacy stream
   The legacy stream also waits for the context's blocking streams. */
/* copy: peer is set for cuMemcpyPeerAsync, which needs no access to pool
   memory of the other device (see the stream-ordered allocator's section);
   any other copy touching a pool block of another device than the one it
   runs on (the stream's, else the current context's) needs the pool to
   grant that device access. */
static CUresult copy(void *dst_host, CUdeviceptr dst_dev, const void *src_host, CUdeviceptr src_dev, size_t n,
		     CUstream s, int async, int peer) {
	CUresult r = need_ctx();
	if (r)
		return r;
	if (n == 0)
		return CUDA_SUCCESS;
	if ((r = check_host_side(src_host, n)) || (r = check_host_side(dst_host, n)))
		return r;
	void *dst = dst_host, *src = (void *)src_host;
	int acc = async && !is_null_stream(s) && live_stream(s) ? s->ctx->dev : t_cur->dev;
	pthread_mutex_lock(&g_mu);
	if (!peer && ((!dst && !pool_access_ok(dst_dev, acc)) || (!src && !pool_access_ok(src_dev, acc))))
		r = CUDA_ERROR_INVALID_VALUE;
	if (!r && !dst)
		r = resolve(dst_dev, n, &dst);
	if (!r && !src)
		r = resolve(src_dev, n, &src);
	pthread_mutex_unlock(&g_mu);
	if (r)
		return r;
	if (!dst || !src)
		return CUDA_ERROR_INVALID_VALUE;
	if (async && !is_null_stream(s)) {
		if (!live_stream(s))
			return CUDA_ERROR_INVALID_HANDLE;
		if (s->flags == 0)
			drain_legacy(s->ctx);
		struct op *o = new_op(dst, src, n);
		if (!o)
			return CUDA_ERROR_OUT_OF_MEMORY;
		pool_note_use(o, dst, src);
		enqueue(s, o);
		return CUDA_SUCCESS;
	}
	struct fake_stream *l = legacy_of(t_cur);
	if (!l)
		return CUDA_ERROR_OUT_OF_MEMORY;
	legacy_sync();
	if (async || (!src_host && !dst_host)) { /* on the legacy stream, or device to device */
		struct op *o = new_op(dst, src, n);
		if (!o)
			return CUDA_ERROR_OUT_OF_MEMORY;
		pool_note_use(o, dst, src);
		enqueue(l, o);
		return CUDA_SUCCESS;
	}
	stream_wait(l);
	if (src_host && !pinned_src(src_host, n)) {
		void *stage = malloc(n);
		struct op *o = stage ? new_op(dst, stage, n) : NULL;
		if (!o) {
			free(stage);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		memcpy(stage, src_host, n);
		o->owned = stage;
		pool_note_use(o, dst, NULL);
		enqueue(l, o);
		return CUDA_SUCCESS;
	}
	struct op now = {0}; /* done at once: checked as an op performed now */
	pool_note_use(&now, dst, src);
	pool_use_check(&now);
	memmove(dst, src, n);
	return CUDA_SUCCESS;
}

API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
	ENTER("cuMemcpyHtoD");
	return copy(NULL, dst, src, 0, n, NULL, 0, 0);
}

API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
	ENTER("cuMemcpyDtoH");
	return copy(dst, 0, NULL, src, n, NULL, 0, 0);
}

API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
	ENTER("cuMemcpyDtoD");
	return copy(NULL, dst, NULL, src, n, NULL, 0, 0);
}

API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
	ENTER("cuMemcpyHtoDAsync");
	return copy(NULL, dst, src, 0, n, s, 1, 0);
}

API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
	ENTER("cuMemcpyDtoHAsync");
	return copy(dst, 0, NULL, src, n, s, 1, 0);
}

API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
	ENTER("cuMemcpyDtoDAsync");
	return copy(NULL, dst, NULL, src, n, s, 1, 0);
}

/* cuMemcpyPeerAsync copies between memory of two contexts; the driver does
   not require peer access (it stages through the host then), so neither
   does the fake. Each pointer must be device memory (cuMemAlloc or a pool's:
   "selecting a context for making p2h2p copies using cudaMemcpyPeerAsync")
   of its context's device. */
API CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream s) {
	ENTER("cuMemcpyPeerAsync");
	CUresult r = need_ctx();
	if (r)
		return r;
	pthread_mutex_lock(&g_mu);
	if (!live_ctx(dctx) || !live_ctx(sctx))
		r = CUDA_ERROR_INVALID_CONTEXT;
	else {
		struct region *d = find_dev(dst), *x = find_dev(src);
		if (!d || !x || (d->kind != K_DEVICE && d->kind != K_POOL) || (x->kind != K_DEVICE && x->kind != K_POOL) ||
		    d->dev != dctx->dev || x->dev != sctx->dev)
			r = CUDA_ERROR_INVALID_VALUE;
	}
	pthread_mutex_unlock(&g_mu);
	if (r)
		return r;
	return copy(NULL, dst, NULL, src, n, s, 1, 1);
}

/* ---- events ---- */

static int live_event(struct fake_event *e) {
	for (struct fake_event *x = g_events; x; x = x->next)
		if (x == e)
			return 1;
	return 0;
}

/* Events belong to a context. cuEventCreate: "Creates an event *phEvent
 * for the current context". cuEventRecord: "hEvent and hStream must be
 * from the same context otherwise CUDA_ERROR_INVALID_HANDLE is returned"
 * (CUDA driver API, Event Management); the NULL stream is the current
 * context's. cuEventElapsedTime: the Programming Guide (Multi-Device
 * System, Stream and Event Behavior): "cudaEventElapsedTime() will fail
 * if the two input events are associated to different devices"; the
 * reference names no code, so the fake answers CUDA_ERROR_INVALID_HANDLE,
 * cuEventRecord's code for the same rule. cuEventSynchronize, cuEventQuery
 * and cuStreamWaitEvent take an event of any context (the same section:
 * they "will succeed even if the input event is associated to a device
 * that is different from the current device").
 *
 * Test hook: long fakecuda_event_misuse(void) counts cuEventDestroy calls
 * of an event a thread is waiting on in cuEventSynchronize: the handle is
 * invalid once destroyed, so in the real driver that wait uses a dead
 * handle. */
static long g_ev_misuse;
static unsigned g_ev_last_flags; /* fakecuda_last_event_flags */

API long fakecuda_event_misuse(void) {
	pthread_mutex_lock(&ev_mu);
	long n = g_ev_misuse;
	pthread_mutex_unlock(&ev_mu);
	return n;
}

API unsigned fakecuda_last_event_flags(void) {
	pthread_mutex_lock(&ev_mu);
	unsigned f = g_ev_last_flags;
	pthread_mutex_unlock(&ev_mu);
	return f;
}

API CUresult cuEventCreate(CUevent *pe, unsigned int flags) {
	ENTER("cuEventCreate");
	if (!pe || (flags & ~0xFu))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = need_ctx();
	if (r)
		return r;
	struct fake_event *e = calloc(1, sizeof *e);
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->refs = 1;
	e->flags = flags;
	e->ctx = t_cur;
	pthread_mutex_lock(&ev_mu);
	g_ev_last_flags = flags;
	e->next = g_events;
	g_events = e;
	pthread_mutex_unlock(&ev_mu);
	*pe = e;
	return CUDA_SUCCESS;
}

API CUresult cuEventRecord(CUevent e, CUstream s) {
	ENTER("cuEventRecord");
	if (ready())
		return ready();
	if (!is_null_stream(s) && !live_stream(s))
		return CUDA_ERROR_INVALID_HANDLE;
	if (is_null_stream(s)) { /* recorded on the legacy stream, after its work */
		CUresult r = need_ctx();
		if (r)
			return r;
		if (!(s = legacy_of(t_cur)))
			return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&ev_mu);
	if (!live_event(e) || e->ctx != s->ctx) { /* "must be from the same context" */
		pthread_mutex_unlock(&ev_mu);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	unsigned long long seq = ++e->recorded;
	e->refs++;
	pthread_mutex_unlock(&ev_mu);
	struct op *o = calloc(1, sizeof *o);
	if (!o) {
		ev_complete(e, 0);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	o->ev = e;
	o->seq = seq;
	enqueue(s, o);
	return CUDA_SUCCESS;
}

API CUresult cuEventQuery(CUevent e) {
	ENTER("cuEventQuery");
	if (ready())
		return ready();
	pthread_mutex_lock(&ev_mu);
	CUresult r = !live_event(e) ? CUDA_ERROR_INVALID_HANDLE
				    : e->done < e->recorded ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
	pthread_mutex_unlock(&ev_mu);
	return r;
}

API CUresult cuEventSynchronize(CUevent e) {
	ENTER("cuEventSynchronize");
	if (ready())
		return ready();
	pthread_mutex_lock(&ev_mu);
	if (!live_event(e)) {
		pthread_mutex_unlock(&ev_mu);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	e->refs++; /* the fake's own memory stays; a destroy meanwhile is counted as misuse */
	e->waiters++;
	while (e->done < e->recorded)
		pthread_cond_wait(&ev_cv, &ev_mu);
	e->waiters--;
	if (--e->refs == 0)
		free(e);
	pthread_mutex_unlock(&ev_mu);
	pool_observe(NULL); /* a synchronization: pools above their release threshold shrink */
	return CUDA_SUCCESS;
}

API CUresult cuEventDestroy_v2(CUevent e) {
	ENTER("cuEventDestroy");
	if (ready())
		return ready();
	pthread_mutex_lock(&ev_mu);
	struct fake_event **pp = &g_events;
	while (*pp && *pp != e)
		pp = &(*pp)->next;
	if (!*pp) {
		pthread_mutex_unlock(&ev_mu);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	*pp = e->next;
	if (e->waiters > 0)
		g_ev_misuse++;
	if (--e->refs == 0) /* pending records keep it until they complete */
		free(e);
	pthread_mutex_unlock(&ev_mu);
	return CUDA_SUCCESS;
}

/* ---- pre-_v2 entry points: present in the real driver with another ABI ---- */

#define V1_STUB(name)                          \
	API CUresult name() {                      \
		ENTER(#name "@v1");                    \
		return CUDA_ERROR_NOT_SUPPORTED;       \
	}

V1_STUB(cuDeviceTotalMem)
V1_STUB(cuMemGetInfo)
V1_STUB(cuDevicePrimaryCtxRelease)
V1_STUB(cuMemAlloc)
V1_STUB(cuMemFree)
V1_STUB(cuMemAllocHost)
V1_STUB(cuMemHostRegister)
V1_STUB(cuMemHostGetDevicePointer)
V1_STUB(cuMemcpyHtoD)
V1_STUB(cuMemcpyDtoH)
V1_STUB(cuMemcpyDtoD)
V1_STUB(cuMemcpyHtoDAsync)
V1_STUB(cuMemcpyDtoHAsync)
V1_STUB(cuMemcpyDtoDAsync)
V1_STUB(cuStreamDestroy)
V1_STUB(cuEventDestroy)
V1_STUB(cuCtxPushCurrent)
V1_STUB(cuCtxPopCurrent)
V1_STUB(cuDevicePrimaryCtxSetFlags)

/* ---- events between streams and event timing (issue 21) ----
 *
 * cuStreamWaitEvent(hStream, hEvent, Flags): "Makes all future work
 * submitted to hStream wait for all work captured in hEvent ... hEvent may
 * be from a different context or device than hStream" (CUDA driver API,
 * Stream Management). The caller is not blocked: the wait is an operation
 * of the stream, performed by its worker in order; cuStreamQuery says
 * CUDA_ERROR_NOT_READY and cuStreamSynchronize waits while it waits. It
 * captures the event's latest record at the time of the call; an event
 * never recorded orders nothing. Flags other than CU_EVENT_WAIT_DEFAULT (0)
 * are CUDA_ERROR_INVALID_VALUE here (CU_EVENT_WAIT_EXTERNAL is for stream
 * capture only).
 *
 * cuEventElapsedTime(pMilliseconds, hStart, hEnd), as documented (Event
 * Management): "If cuEventRecord() has not been called on either event then
 * CUDA_ERROR_INVALID_HANDLE is returned. If cuEventRecord() has been called
 * on both events but one or both of them has not yet been completed (that
 * is, cuEventQuery() would return CUDA_ERROR_NOT_READY on at least one of
 * the events), CUDA_ERROR_NOT_READY is returned. If either event was
 * created with the CU_EVENT_DISABLE_TIMING flag, then this function will
 * return CUDA_ERROR_INVALID_HANDLE." The time is between the two
 * completions (the fake's clock, CLOCK_MONOTONIC), negative if hEnd
 * completed first.
 */

static void stream_wait_event_op(struct op *o) {
	struct fake_event *e = o->wait_ev;
	pthread_mutex_lock(&ev_mu);
	while (e->done < o->wait_seq)
		pthread_cond_wait(&ev_cv, &ev_mu);
	if (--e->refs == 0)
		free(e);
	pthread_mutex_unlock(&ev_mu);
	free(o);
}

API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
	ENTER("cuStreamWaitEvent");
	if (ready())
		return ready();
	if (flags != 0 || !e)
		return CUDA_ERROR_INVALID_VALUE;
	if (!is_null_stream(s) && !live_stream(s))
		return CUDA_ERROR_INVALID_HANDLE;
	if (is_null_stream(s)) {
		CUresult r = need_ctx();
		if (r)
			return r;
		if (!(s = legacy_of(t_cur)))
			return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&ev_mu);
	if (!live_event(e)) {
		pthread_mutex_unlock(&ev_mu);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	unsigned long long seq = e->recorded;
	if (seq == 0) { /* never recorded: nothing to wait for */
		pthread_mutex_unlock(&ev_mu);
		return CUDA_SUCCESS;
	}
	e->refs++;
	pthread_mutex_unlock(&ev_mu);
	struct op *o = calloc(1, sizeof *o);
	if (!o) {
		pthread_mutex_lock(&ev_mu);
		if (--e->refs == 0)
			free(e);
		pthread_mutex_unlock(&ev_mu);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	o->wait_ev = e;
	o->wait_seq = seq;
	enqueue(s, o);
	return CUDA_SUCCESS;
}

API CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end) {
	ENTER("cuEventElapsedTime");
	if (ready())
		return ready();
	if (!ms)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&ev_mu);
	if (!live_event(start) || !live_event(end) || start->recorded == 0 || end->recorded == 0 ||
	    (start->flags & 2) || (end->flags & 2) || start->ctx != end->ctx)
		r = CUDA_ERROR_INVALID_HANDLE;
	else if (start->done < start->recorded || end->done < end->recorded)
		r = CUDA_ERROR_NOT_READY;
	else
		*ms = (float)(end->done_ms - start->done_ms);
	pthread_mutex_unlock(&ev_mu);
	return r;
}

/* ---- the stream-ordered allocator (issue 21) ----
 *
 * CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED (115): "Device supports using
 * the cuMemAllocAsync and cuMemPool family of APIs"; 1 here, 0 with
 * FAKECUDA_NO_MEMPOOLS=1 (an older driver: every pool call then fails with
 * CUDA_ERROR_NOT_SUPPORTED).
 *
 * What the reference says, and what the fake does (never more):
 *   - Overview (Stream Ordered Memory Allocator): "All asynchronous accesses
 *     of the allocation must happen between the stream executions of the
 *     allocation and the free. ... The allocator is free to reallocate the
 *     memory as long as it can guarantee that compliant memory accesses will
 *     not overlap temporally." cuMemAllocFromPoolAsync: "A pointer to the
 *     allocated memory is returned immediately in *dptr. The allocation must
 *     not be accessed until the allocation operation completes."
 *     cuMemFreeAsync: "Inserts a free operation into hStream. The allocation
 *     must not be accessed after stream execution reaches the free."
 *     So the allocation and the free are operations of the stream, done by
 *     its worker in order (held at the "stream" gate like any other work).
 *     A copy that touches a block before the allocation operation that
 *     returned it completed, or after a free issued later completed, is a
 *     misuse: the worker counts it (fakecuda_pool_misuse) and says so on
 *     stderr. The fake does not undo it: the real driver's result is
 *     undefined.
 *   - Reuse. A block freed on stream S is handed out again at once to an
 *     allocation on S (stream order puts the new use after the free), and to
 *     an allocation on any other stream only once S has performed the free
 *     (CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: "Allow reuse of already
 *     completed frees when there is no dependency between the free and
 *     allocation"). The fake does not follow event dependencies (the
 *     REUSE_FOLLOW_EVENT_DEPENDENCIES attribute only allows the driver to;
 *     the fake reuses less, never earlier).
 *   - CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES (on by default), the
 *     Programming Guide: "Failing to allocate and map more physical memory
 *     from the OS, the driver will look for memory whose availability
 *     depends on another stream's pending progress. If such memory is
 *     found, the driver will insert the required dependency into the
 *     allocating stream and reuse the memory." The fake does so: when the
 *     device has no room for a new block and the attribute is on, a block
 *     whose free is still pending on another stream is handed out, and the
 *     allocating stream waits for that free before its later work (a
 *     synchronization of the allocating stream waits for it too).
 *   - An allocation or free on a stream with no work pending is performed at
 *     once, even while the "stream" gate holds the device's work:
 *     cuMemAllocFromPoolAsync returns the pointer "immediately", the
 *     suballocation is the host's, and nothing on the stream precedes it.
 *   - Access (Programming Guide, Device Accessibility for Multi-GPU
 *     Support): "memory pool allocation accessibility does not follow
 *     cudaDeviceEnablePeerAccess or cuCtxEnablePeerAccess. For memory pools,
 *     the API cudaMemPoolSetAccess modifies what devices can access
 *     allocations from a pool. By default, allocations are accessible only
 *     from the device where the allocations are located. ... To enable
 *     access from other devices, the accessing device must be peer capable
 *     with the memory pool's device ... the set access may fail with
 *     cudaErrorInvalidDevice." A copy on a stream (or, synchronous, in a
 *     context) of another device that reads or writes a pool block fails
 *     with CUDA_ERROR_INVALID_VALUE unless the pool grants that device
 *     access (the real driver may fault later instead; the fake says so at
 *     once). cuMemcpyPeerAsync needs no access: "this can be useful when
 *     selecting a context for making p2h2p copies using
 *     cudaMemcpyPeerAsync" (Pointer Attributes). cuMemPoolSetAccess to a
 *     device that cannot reach the pool's (FAKECUDA_PEER) gives
 *     CUDA_ERROR_INVALID_DEVICE; the pool's own device cannot lose access
 *     ("This access cannot be revoked"); the test hook
 *     fakecuda_pool_access(dev, peer) says whether every pool made with
 *     cuMemPoolCreate on dev grants peer access.
 *   - CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: "Amount of reserved memory in bytes
 *     to hold onto before trying to release memory back to the OS. When more
 *     than the release threshold bytes of memory are held by the memory pool,
 *     the allocator will try to release memory back to the OS on the next
 *     call to stream, event or context synchronize. (default 0)". Here at
 *     cuStreamSynchronize and cuEventSynchronize.
 *   - cuMemPoolTrimTo: "Releases memory back to the OS until the pool
 *     contains fewer than minBytesToKeep reserved bytes, or there is no more
 *     memory that the allocator can safely release. ... Allocations that
 *     have been asynchronously freed but whose completion has not been
 *     observed on the host (eg. by a synchronize) can count as outstanding."
 *     The fake takes the strict reading: only blocks whose free completed
 *     and was observed (cuStreamSynchronize of the freeing stream) are
 *     released, by the threshold too.
 *   - cuMemPoolDestroy: "If any pointers obtained from this pool haven't been
 *     freed or the pool has free operations that haven't completed when
 *     cuMemPoolDestroy is invoked, the function will return immediately and
 *     the resources associated with the pool will be released automatically
 *     once there are no more outstanding allocations." "A device's default
 *     memory pool cannot be destroyed" (CUDA_ERROR_INVALID_VALUE).
 *   - cuMemFreeAsync of memory no pool handed out, or already freed:
 *     CUDA_ERROR_INVALID_VALUE. cuMemFree_v2 of pool memory is refused too
 *     (the reference allows it without synchronization; ompalloc never does it).
 *   - CUmemPoolProps (cuda.h, 88 bytes): allocType PINNED (1), handleTypes
 *     NONE (0), location {DEVICE (1), ordinal}; other handle types and a
 *     nonzero maxSize are CUDA_ERROR_NOT_SUPPORTED here.
 *   - Attributes (CUmemPool_attribute): 1-3 the reuse switches (int, kept but
 *     not followed), 4 RELEASE_THRESHOLD, 5 RESERVED_MEM_CURRENT, 6
 *     RESERVED_MEM_HIGH, 7 USED_MEM_CURRENT, 8 USED_MEM_HIGH (cuuint64_t; the
 *     high marks may only be set to 0, which resets them). Reserved bytes are
 *     the blocks the pool holds (sizes rounded up to 512 bytes), used bytes
 *     the blocks handed out and not freed.
 *   - The last cuDevicePrimaryCtxRelease resets the context: the pools of
 *     its device lose every block, and pools made with cuMemPoolCreate are
 *     gone.
 */

typedef struct fake_pool *CUmemoryPool;

typedef struct {
	int allocType, handleTypes;
	struct {
		int type, id;
	} location;
	void *win32SecurityAttributes;
	size_t maxSize;
	unsigned short usage;
	unsigned char reserved[54];
} CUmemPoolProps;
_Static_assert(sizeof(CUmemPoolProps) == 88, "CUmemPoolProps is 88 bytes in cuda.h");

enum { POOL_ALLOC = 1, POOL_FREE = 2 };
enum { B_LIVE, B_FREEING, B_FREE, B_RELEASED };

struct pool_blk {
	struct fake_pool *pool;
	struct region *r; /* NULL once released */
	size_t size;
	int state;
	struct fake_stream *free_stream; /* where the last cuMemFreeAsync was issued */
	int observed;                    /* B_FREE, and the host synchronized with free_stream since */
	unsigned long long allocs, allocs_done, frees, frees_done;
	struct pool_blk *next;
};

struct fake_pool {
	int dev, is_default, destroyed;
	int reuse[4]; /* attributes 1-3 */
	unsigned char access[MAX_DEVICES]; /* cuMemPoolSetAccess: devices other than dev that may access its blocks */
	unsigned long long threshold, reserved_high, used_high;
	struct pool_blk *blks;
	struct fake_pool *next; /* every pool ever made: never freed, ops may point at its blocks */
};

/* All under g_mu. */
static struct fake_pool *g_pools;
static struct fake_pool *g_default_pool[MAX_DEVICES];
static long g_pool_misuse;
/* Pool allocations served by a block the pool held already (reused) and by
   a new block the pool reserved from the device (new): the fake's own
   count of what ompalloc reports as the pool's hits and misses. Test hook
   fakecuda_pool_allocs(reused), not in the real library. */
static long g_pool_allocs[2];

static int pools_supported(void) { return env_long("FAKECUDA_NO_MEMPOOLS", 0) ? 0 : 1; }

API long fakecuda_pool_allocs(int reused) {
	pthread_mutex_lock(&g_mu);
	long n = g_pool_allocs[reused != 0];
	pthread_mutex_unlock(&g_mu);
	return n;
}

API long fakecuda_pool_misuse(void) {
	pthread_mutex_lock(&g_mu);
	long n = g_pool_misuse;
	pthread_mutex_unlock(&g_mu);
	return n;
}

static int live_pool(struct fake_pool *p) {
	for (struct fake_pool *x = g_pools; x; x = x->next)
		if (x == p)
			return !x->destroyed;
	return 0;
}

static struct fake_pool *new_pool(int dev, int is_default) {
	struct fake_pool *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->dev = dev;
	p->is_default = is_default;
	p->reuse[1] = p->reuse[2] = p->reuse[3] = 1;
	p->next = g_pools;
	g_pools = p;
	return p;
}

static void pool_bytes(struct fake_pool *p, unsigned long long *reserved, unsigned long long *used) {
	*reserved = *used = 0;
	for (struct pool_blk *b = p->blks; b; b = b->next) {
		if (b->state == B_RELEASED)
			continue;
		*reserved += b->size;
		if (b->state == B_LIVE)
			*used += b->size;
	}
}

/* blk_release gives a block's memory back to the device. The backing store
   is poisoned and kept, not freed: a misused copy still queued writes
   there instead of into freed memory. */
static void blk_release(struct pool_blk *b) {
	if (b->state == B_RELEASED)
		return;
	if (b->r) {
		memset((void *)b->r->host, 0xDD, b->size);
		g_used[b->pool->dev] -= b->size;
		remove_region(b->r);
		b->r = NULL;
	}
	b->state = B_RELEASED;
}

/* pool_trim_locked releases observed free blocks while more than keep bytes
   are reserved. */
static void pool_trim_locked(struct fake_pool *p, unsigned long long keep) {
	unsigned long long reserved, used;
	pool_bytes(p, &reserved, &used);
	for (struct pool_blk *b = p->blks; b && reserved > keep; b = b->next) {
		if (b->state == B_FREE && b->observed) {
			reserved -= b->size;
			blk_release(b);
		}
	}
}

/* pool_observe: the host synchronized with stream s (NULL: with an event,
   which observes nothing here): the frees s performed are observed; every
   pool above its release threshold gives back what it may. */
static void pool_observe(struct fake_stream *s) {
	pthread_mutex_lock(&g_mu);
	for (struct fake_pool *p = g_pools; p; p = p->next) {
		if (p->destroyed)
			continue;
		for (struct pool_blk *b = p->blks; b; b = b->next)
			if (s && b->state == B_FREE && b->free_stream == s)
				b->observed = 1;
		pool_trim_locked(p, p->threshold);
	}
	pthread_mutex_unlock(&g_mu);
}

static void pool_reset(int dev) {
	pthread_mutex_lock(&g_mu);
	for (struct fake_pool *p = g_pools; p; p = p->next) {
		if (p->dev != dev)
			continue;
		for (struct pool_blk *b = p->blks; b; b = b->next)
			blk_release(b);
		if (!p->is_default)
			p->destroyed = 1;
	}
	pthread_mutex_unlock(&g_mu);
}

static void pool_op_done(struct op *o) {
	struct pool_blk *b = o->pblk;
	pthread_mutex_lock(&g_mu);
	if (o->pool_op == POOL_ALLOC) {
		if (o->pseq > b->allocs_done)
			b->allocs_done = o->pseq;
	} else {
		if (o->pseq > b->frees_done)
			b->frees_done = o->pseq;
		if (b->state == B_FREEING && b->frees == o->pseq) {
			b->state = B_FREE;
			b->observed = 0;
			if (b->pool->destroyed)
				blk_release(b);
		}
	}
	pthread_mutex_unlock(&g_mu);
}

/* find_pool_host: the live pool block whose backing store holds p. */
static struct pool_blk *find_pool_host(const void *p) {
	if (!p)
		return NULL;
	for (struct region *r = g_regions; r; r = r->next)
		if (r->kind == K_POOL && (uintptr_t)p >= r->host && (uintptr_t)p - r->host < r->size)
			return r->blk;
	return NULL;
}

static void pool_note_use(struct op *o, const void *dst, const void *src) {
	pthread_mutex_lock(&g_mu);
	const void *sides[2] = {dst, src};
	for (int i = 0; i < 2; i++) {
		struct pool_blk *b = find_pool_host(sides[i]);
		if (b) {
			o->use[i] = b;
			o->use_alloc[i] = b->allocs;
			o->use_free[i] = b->frees;
		}
	}
	pthread_mutex_unlock(&g_mu);
}

static void pool_use_check(struct op *o) {
	if (!o->use[0] && !o->use[1])
		return;
	pthread_mutex_lock(&g_mu);
	for (int i = 0; i < 2; i++) {
		struct pool_blk *b = o->use[i];
		if (!b)
			continue;
		const char *what = NULL;
		if (b->allocs_done < o->use_alloc[i])
			what = "before its allocation completed";
		else if (b->frees_done > o->use_free[i])
			what = "after a later free of it completed";
		if (what) {
			g_pool_misuse++;
			fprintf(stderr, "fakecuda: a copy %s pool memory at %#llx %s\n", i == 0 ? "writes" : "reads",
				b->r ? (unsigned long long)b->r->dptr : 0ULL, what);
		}
	}
	pthread_mutex_unlock(&g_mu);
}

/* pool_dep_wait: an allocation that took a block whose free is pending on
   another stream waits for that free (an internal dependency). Blocks are
   never freed, so o->dep_blk stays valid. */
static void pool_dep_wait(struct op *o) {
	if (!o->dep_blk)
		return;
	for (;;) {
		pthread_mutex_lock(&g_mu);
		int done = o->dep_blk->frees_done >= o->dep_seq;
		pthread_mutex_unlock(&g_mu);
		if (done)
			return;
		sleep_us(100);
	}
}

/* pool_access_ok: whether device acc may reach the device memory at d: any
   memory but a pool block of another device whose pool did not grant acc
   access. Called with g_mu held. */
static int pool_access_ok(CUdeviceptr d, int acc) {
	struct region *x = find_dev(d);
	if (!x || x->kind != K_POOL || x->dev == acc)
		return 1;
	return acc >= 0 && acc < MAX_DEVICES && x->blk->pool->access[acc];
}

API int fakecuda_pool_access(int dev, int peer) {
	int n = 0, ok = 1;
	pthread_mutex_lock(&g_mu);
	for (struct fake_pool *p = g_pools; p; p = p->next)
		if (p->dev == dev && !p->is_default && !p->destroyed) {
			n++;
			if (peer < 0 || peer >= MAX_DEVICES || !p->access[peer])
				ok = 0;
		}
	pthread_mutex_unlock(&g_mu);
	return n > 0 && ok;
}

/* CUmemAccessDesc (cuda.h): CUmemLocation location {type, id};
   CUmemAccess_flags flags (NONE 0, PROT_READ 1, PROT_READWRITE 3). */
typedef struct {
	struct {
		int type, id;
	} location;
	int flags;
} CUmemAccessDesc;
_Static_assert(sizeof(CUmemAccessDesc) == 12, "CUmemAccessDesc is 12 bytes in cuda.h");

API CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count) {
	ENTER("cuMemPoolSetAccess");
	if (ready())
		return ready();
	if (!map && count)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&g_mu);
	if (!live_pool(pool))
		r = CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; !r && i < count; i++) {
		int id = map[i].location.id, fl = map[i].flags;
		if (map[i].location.type != 1 || (fl != 0 && fl != 1 && fl != 3))
			r = CUDA_ERROR_INVALID_VALUE;
		else if (!valid_dev(id))
			r = CUDA_ERROR_INVALID_DEVICE;
		else if (id == pool->dev && fl != 3)
			r = CUDA_ERROR_INVALID_VALUE; /* "This access cannot be revoked" */
		else if (id != pool->dev && fl != 0 && !can_peer(id, pool->dev))
			r = CUDA_ERROR_INVALID_DEVICE;
	}
	for (size_t i = 0; !r && i < count; i++)
		if (map[i].location.id != pool->dev)
			pool->access[map[i].location.id] = map[i].flags != 0;
	pthread_mutex_unlock(&g_mu);
	return r;
}

API CUresult cuMemPoolGetAccess(int *flags, CUmemoryPool pool, const void *location) {
	ENTER("cuMemPoolGetAccess");
	if (ready())
		return ready();
	if (!flags || !location)
		return CUDA_ERROR_INVALID_VALUE;
	const int *loc = location; /* CUmemLocation {type, id} */
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&g_mu);
	if (!live_pool(pool) || loc[0] != 1)
		r = CUDA_ERROR_INVALID_VALUE;
	else if (!valid_dev(loc[1]))
		r = CUDA_ERROR_INVALID_DEVICE;
	else
		*flags = loc[1] == pool->dev || pool->access[loc[1]] ? 3 : 0;
	pthread_mutex_unlock(&g_mu);
	return r;
}

API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice d) {
	ENTER("cuDeviceGetDefaultMemPool");
	if (!pool)
		return CUDA_ERROR_INVALID_VALUE;
	if (ready())
		return ready();
	if (!valid_dev(d))
		return CUDA_ERROR_INVALID_DEVICE;
	if (!pools_supported())
		return CUDA_ERROR_NOT_SUPPORTED;
	pthread_mutex_lock(&g_mu);
	if (!g_default_pool[d])
		g_default_pool[d] = new_pool(d, 1);
	*pool = g_default_pool[d];
	pthread_mutex_unlock(&g_mu);
	return *pool ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
	ENTER("cuMemPoolCreate");
	if (!pool || !props)
		return CUDA_ERROR_INVALID_VALUE;
	if (ready())
		return ready();
	if (props->allocType != 1 || props->location.type != 1)
		return CUDA_ERROR_INVALID_VALUE;
	if (!valid_dev(props->location.id))
		return CUDA_ERROR_INVALID_DEVICE;
	if (!pools_supported() || props->handleTypes != 0 || props->maxSize != 0)
		return CUDA_ERROR_NOT_SUPPORTED;
	pthread_mutex_lock(&g_mu);
	*pool = new_pool(props->location.id, 0);
	pthread_mutex_unlock(&g_mu);
	return *pool ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

API CUresult cuMemPoolDestroy(CUmemoryPool pool) {
	ENTER("cuMemPoolDestroy");
	if (ready())
		return ready();
	pthread_mutex_lock(&g_mu);
	if (!live_pool(pool) || pool->is_default) {
		pthread_mutex_unlock(&g_mu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	pool->destroyed = 1;
	for (struct pool_blk *b = pool->blks; b; b = b->next)
		if (b->state == B_FREE)
			blk_release(b);
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void *value) {
	ENTER("cuMemPoolSetAttribute");
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	if (ready())
		return ready();
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&g_mu);
	unsigned long long reserved, used, v = *(unsigned long long *)value;
	if (!live_pool(pool)) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else if (attr >= 1 && attr <= 3) {
		pool->reuse[attr] = *(int *)value != 0;
	} else if (attr == 4) {
		pool->threshold = v;
	} else if ((attr == 6 || attr == 8) && v == 0) { /* "It is illegal to set this attribute to a non-zero value" */
		pool_bytes(pool, &reserved, &used);
		if (attr == 6)
			pool->reserved_high = reserved;
		else
			pool->used_high = used;
	} else {
		r = CUDA_ERROR_INVALID_VALUE;
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, int attr, void *value) {
	ENTER("cuMemPoolGetAttribute");
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	if (ready())
		return ready();
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&g_mu);
	unsigned long long reserved, used;
	if (!live_pool(pool)) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		pool_bytes(pool, &reserved, &used);
		switch (attr) {
		case 1:
		case 2:
		case 3:
			*(int *)value = pool->reuse[attr];
			break;
		case 4:
			*(unsigned long long *)value = pool->threshold;
			break;
		case 5:
			*(unsigned long long *)value = reserved;
			break;
		case 6:
			*(unsigned long long *)value = pool->reserved_high;
			break;
		case 7:
			*(unsigned long long *)value = used;
			break;
		case 8:
			*(unsigned long long *)value = pool->used_high;
			break;
		default:
			r = CUDA_ERROR_INVALID_VALUE;
		}
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
	ENTER("cuMemPoolTrimTo");
	if (ready())
		return ready();
	pthread_mutex_lock(&g_mu);
	if (!live_pool(pool)) {
		pthread_mutex_unlock(&g_mu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	pool_trim_locked(pool, keep);
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

/* op_stream: the stream a pool operation goes to (the NULL stream: the
   current context's legacy stream), or NULL with *r set. */
static struct fake_stream *op_stream(CUstream s, CUresult *r) {
	if ((*r = need_ctx()))
		return NULL;
	if (is_null_stream(s)) {
		struct fake_stream *l = legacy_of(t_cur);
		if (!l)
			*r = CUDA_ERROR_OUT_OF_MEMORY;
		return l;
	}
	if (!live_stream(s)) {
		*r = CUDA_ERROR_INVALID_HANDLE;
		return NULL;
	}
	return s;
}

/* pool_enqueue issues a pool operation on s. On an idle stream nothing
   precedes it: the fake performs it at once, as the driver's host-side
   suballocation does, unless it waits for another stream's free (an
   internal dependency). */
static void pool_enqueue(struct fake_stream *s, struct op *o) {
	pthread_mutex_lock(&s->mu);
	if (!pending(s) && !o->dep_blk) {
		pool_op_done(o); /* s->mu, then g_mu: the order the worker's callers keep */
		pthread_mutex_unlock(&s->mu);
		free(o);
		return;
	}
	pthread_mutex_unlock(&s->mu);
	enqueue(s, o);
}

static CUresult pool_alloc(CUdeviceptr *dptr, size_t n, struct fake_pool *pool, CUstream hs) {
	if (!dptr || n == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!pools_supported())
		return CUDA_ERROR_NOT_SUPPORTED;
	CUresult r;
	struct fake_stream *s = op_stream(hs, &r);
	if (!s)
		return r;
	struct op *o = calloc(1, sizeof *o);
	if (!o)
		return CUDA_ERROR_OUT_OF_MEMORY;
	size_t sz = (n + 511) & ~(size_t)511;
	pthread_mutex_lock(&g_mu);
	if (!pool)
		pool = g_default_pool[s->ctx->dev] ? g_default_pool[s->ctx->dev]
						   : (g_default_pool[s->ctx->dev] = new_pool(s->ctx->dev, 1));
	if (!pool || !live_pool(pool)) {
		pthread_mutex_unlock(&g_mu);
		free(o);
		return pool ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
	}
	struct pool_blk *got = NULL;
	for (int pass = 0; pass < 2 && !got; pass++) /* the exact size first, then at most twice it */
		for (struct pool_blk *b = pool->blks; b && !got; b = b->next)
			if ((b->state == B_FREE || (b->state == B_FREEING && b->free_stream == s)) &&
			    (pass == 0 ? b->size == sz : b->size > sz && b->size <= 2 * sz))
				got = b;
	if (!got && sz > g_mem - g_used[pool->dev] && pool->reuse[3]) {
		/* No room for a new block: reuse one whose free is pending on
		   another stream, with the dependency inserted. */
		for (struct pool_blk *b = pool->blks; b && !got; b = b->next)
			if (b->state == B_FREEING && b->size >= sz && b->size <= 2 * sz) {
				got = b;
				o->dep_blk = b;
				o->dep_seq = b->frees;
			}
	}
	g_pool_allocs[got != NULL]++; /* undone below if the new block cannot be had */
	if (!got) {
		int dev = pool->dev;
		void *back = sz <= g_mem - g_used[dev] ? malloc(sz) : NULL;
		got = back ? calloc(1, sizeof *got) : NULL;
		struct region *reg = got ? add_region(K_POOL, dev, 0, (uintptr_t)back, g_next[dev], sz) : NULL;
		if (!reg) {
			g_pool_allocs[0]--;
			pthread_mutex_unlock(&g_mu);
			free(got);
			free(back);
			free(o);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		memset(back, 0xA5, sz);
		g_next[dev] += (sz + 0xFFF) & ~(CUdeviceptr)0xFFF;
		g_used[dev] += sz;
		reg->blk = got;
		got->r = reg;
		got->pool = pool;
		got->size = sz;
		got->next = pool->blks;
		pool->blks = got;
	}
	got->state = B_LIVE;
	got->observed = 0;
	o->pool_op = POOL_ALLOC;
	o->pblk = got;
	o->pseq = ++got->allocs;
	*dptr = got->r->dptr;
	unsigned long long reserved, used;
	pool_bytes(pool, &reserved, &used);
	if (reserved > pool->reserved_high)
		pool->reserved_high = reserved;
	if (used > pool->used_high)
		pool->used_high = used;
	pthread_mutex_unlock(&g_mu);
	pool_enqueue(s, o);
	return CUDA_SUCCESS;
}

API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t n, CUmemoryPool pool, CUstream s) {
	ENTER("cuMemAllocFromPoolAsync");
	if (!pool)
		return CUDA_ERROR_INVALID_VALUE;
	return pool_alloc(dptr, n, pool, s);
}

/* cuMemAllocAsync: from the current pool of the stream's device, the
   default pool here (cuDeviceSetMemPool is not simulated). */
API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t n, CUstream s) {
	ENTER("cuMemAllocAsync");
	return pool_alloc(dptr, n, NULL, s);
}

API CUresult cuMemFreeAsync(CUdeviceptr d, CUstream hs) {
	ENTER("cuMemFreeAsync");
	CUresult r;
	struct fake_stream *s = op_stream(hs, &r);
	if (!s)
		return r;
	struct op *o = calloc(1, sizeof *o);
	if (!o)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&g_mu);
	struct region *x = find_dev(d);
	if (!x || x->kind != K_POOL || x->dptr != d || x->blk->state != B_LIVE) {
		pthread_mutex_unlock(&g_mu);
		free(o);
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct pool_blk *b = x->blk;
	b->state = B_FREEING;
	b->free_stream = s;
	o->pool_op = POOL_FREE;
	o->pblk = b;
	o->pseq = ++b->frees;
	pthread_mutex_unlock(&g_mu);
	pool_enqueue(s, o);
	return CUDA_SUCCESS;
}
