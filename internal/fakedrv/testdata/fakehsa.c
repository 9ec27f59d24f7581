/*
 * fakehsa.c: a test-only stand-in for ROCm's libhsa-runtime64.so.1.
 *
 * It follows the real ABI of the calls ompalloc binds (hsa.h, hsa_ext_amd.h):
 * hsa_status_t is an int with the real values, hsa_agent_t,
 * hsa_amd_memory_pool_t and hsa_signal_t are structs of one uint64_t handle
 * passed by value, hsa_signal_value_t is int64_t, hsa_amd_pointer_info_t has
 * the real layout and honours its caller-set size field. Nothing here talks to
 * a GPU: "device memory" is host memory behind addresses the host cannot use.
 *
 * Simulated system: one CPU agent ("Fake HSA CPU", pools: fine-grained with
 * KERNARG_INIT, coarse-grained) then FAKEHSA_GPUS GPU agents (name "gfx90a",
 * product "Fake AMD Instinct MI210"; pools: coarse-grained global VRAM,
 * fine-grained global VRAM, group segment that cannot be allocated).
 *
 * Deliberate strictness, so that tests catch what a real GPU would punish
 * with a memory fault or silent corruption:
 *  - coarse-grained GPU memory lives at addresses with bit 62 set (not
 *    canonical on x86-64): the host faults if it dereferences them;
 *  - hsa_amd_memory_lock returns an agent pointer with bit 61 set, distinct
 *    from the host pointer; async copies accept only memory the runtime knows
 *    (pool allocations, the agent pointer of a lock), never pageable memory,
 *    and memory of another agent's pool only after hsa_amd_agents_allow_access
 *    for every GPU agent of the copy (both, for a copy between two GPUs);
 *  - hsa_amd_memory_lock maps the memory for the agents it is given (all of
 *    them with NULL, 0) and copies by another GPU agent are refused; memory
 *    of a pool (HSA_EXT_POINTER_TYPE_HSA) cannot be locked, as
 *    hsakmt_fmm_register_memory refuses it;
 *  - hsa_amd_memory_pool_free wants the exact pointer that was allocated; a
 *    lock overlapping another lock with a different range is refused;
 *  - locks are not counted. ROCr's MemoryRegion::Lock registers and maps the
 *    range again for every call, and MemoryRegion::Unlock does
 *        MakeKfdMemoryUnresident(host_ptr);
 *        DeregisterMemory(host_ptr);
 *        return HSA_STATUS_SUCCESS;
 *    (src/core/runtime/amd_memory_region.cpp): the first unlock takes the
 *    GPU mapping away however many locks of the range preceded it, and the
 *    SVM path (hsaKmtRegisterMemory through KFD SVM attributes) counts
 *    nothing at all. So a second lock of an identical range succeeds with the
 *    same agent pointer, and the first unlock ends it;
 *  - hsa_amd_memory_unlock of memory that is not locked (never, or no more,
 *    or an interior pointer) returns HSA_STATUS_SUCCESS and does nothing, as
 *    that same Unlock does: its result says nothing about the lock;
 *  - hsa_amd_pointer_info of any pool allocation, VRAM included, reports
 *    hostBaseAddress == agentBaseAddress, as ROCr does on current systems
 *    (libhsakmt's CPUAddress is the allocation's address; ROCr's own comment
 *    in Runtime::PtrInfo: "For device memory, hostBaseAddress is either equal
 *    to agentBaseAddress or is NULL when the CPU does not have access"), so a
 *    host address does not tell host memory from VRAM: agentOwner and
 *    global_flags do;
 *  - destroying a signal that a pending copy still uses fails with
 *    HSA_STATUS_ERROR_RESOURCE_FREE.
 *
 * Environment (read when hsa_init takes the reference count from 0 to 1):
 *  FAKEHSA_GPUS=N           number of GPU agents, 0..16 (default 2)
 *  FAKEHSA_NO_KFD=1         hsa_init fails with HSA_STATUS_ERROR_OUT_OF_RESOURCES
 *                           like the real runtime without /dev/kfd
 *  FAKEHSA_COPY_DELAY_US=N  an async copy is due N microseconds after it was
 *                           submitted (default 2000); then one of the copy
 *                           engines performs it once its dependent signals are 0
 *  FAKEHSA_ENGINES=N        copy engines, worker threads started at the first
 *                           async copy of the process, 1..16 (default 2): each
 *                           performs the newest due copy whose dependencies are
 *                           met, so copies not ordered by signals complete in
 *                           any order, as ROCr's DMA engines do (see "copy
 *                           engines" below)
 *  FAKEHSA_VRAM_MB=N        size of each GPU's coarse-grained pool (default 1024)
 *  FAKEHSA_NO_PEER=1        GPUs cannot reach each other's pools: the access of a
 *                           GPU agent to another GPU's pool is NEVER_ALLOWED and
 *                           hsa_amd_agents_allow_access refuses it (default: a
 *                           GPU reaches another's pool once allowed, as over
 *                           xGMI or PCIe peer-to-peer)
 *  FAKEHSA_PCI=ID[,ID...]   PCI addresses of the GPU agents, in order, as
 *                           domain:bus:device.function ("0000:c1:00.0"):
 *                           HSA_AMD_AGENT_INFO_BDFID answers bus<<8|device<<3|
 *                           function and HSA_AMD_AGENT_INFO_DOMAIN the domain.
 *                           A GPU without an entry (the default) refuses both
 *                           with HSA_STATUS_ERROR_INVALID_ARGUMENT, as a runtime
 *                           that lacks the attributes does
 *  FAKEHSA_NO_COARSE_GPUS=I[,I...]  the GPUs (0-based) whose coarse-grained pool
 *                           cannot be allocated from (RUNTIME_ALLOC_ALLOWED false):
 *                           such an agent offers no VRAM for hsa_amd_memory_pool_allocate
 *  FAKEHSA_APU=1            every GPU is a full-profile APU (HSA_AGENT_INFO_PROFILE
 *                           answers HSA_PROFILE_FULL): ROCr's MemoryRegion::Lock
 *                           "For APU, any host pointer is always accessible by the
 *                           gpu" returns the host pointer itself and registers
 *                           nothing (pointer info says UNKNOWN), Unlock returns
 *                           success at once, and async copies take any host memory
 * Read on every call, so a test may change it between calls:
 *  FAKEHSA_FAIL=SPEC[,SPEC...] with SPEC = FUNCTION:N[:CODE]
 *      the Nth call of FUNCTION (counted from the first call of any function
 *      that saw the variable's current value, so setting the same value
 *      again does not restart the count) fails with CODE (decimal or 0x hex; default
 *      HSA_STATUS_ERROR_OUT_OF_RESOURCES); N = '*' fails every call.
 *      Example: FAKEHSA_FAIL=hsa_amd_memory_lock:2,hsa_signal_create:*:0x1000
 *  FAKEHSA_NO_MEMORY_AVAIL=1  hsa_agent_get_info(HSA_AMD_AGENT_INFO_MEMORY_AVAIL)
 *                           fails with HSA_STATUS_ERROR_INVALID_ARGUMENT, as a
 *                           runtime older than the attribute does (it
 *                           otherwise answers the GPU's free VRAM)
 *  FAKEHSA_SVM=1            hsa_amd_pointer_info answers HSA_EXT_POINTER_TYPE_UNKNOWN
 *                           for locked memory, as ROCm does where libhsakmt locks
 *                           through the KFD SVM API (the default on current GPUs
 *                           unless HSA_USE_SVM=0)
 *
 * Test hooks (not in the real library): int64_t fakehsa_count(const char *what)
 * with what = "signals" (live), "allocs", "gpu_allocs" (those from a GPU
 * agent's pools), "vram_used:N" (bytes allocated from GPU N's coarse-grained
 * pool, N counted from 0), "alloc_calls" (successful
 * hsa_amd_memory_pool_allocate calls), "locks", "pending" (copies not yet
 * performed), "copies" (performed), "due" (copies not started whose delay
 * has passed: they wait for their dependencies or the "copy" gate only),
 * "inits" (reference count), "waiting" (threads in hsa_signal_wait_scacquire),
 * "waited_destroys" (hsa_signal_destroy calls of a signal a thread was
 * waiting on: a use after free in the real runtime), "lock_calls"
 * (successful hsa_amd_memory_lock calls), "unlock_calls" (all
 * hsa_amd_memory_unlock calls), "stray_unlocks" (those of memory not locked),
 * "gated" (calls, and copy engines holding due copies, waiting at a closed gate); void
 * fakehsa_gate(const char *fn, int closed) closes or opens a gate in front
 * of fn ("hsa_amd_memory_unlock" or "hsa_amd_memory_lock"): a call arriving at a closed gate waits, holding
 * no lock of the fake, until the gate opens, as a device-synchronizing call
 * may take milliseconds to seconds. The gate named "copy" holds the device's
 * work instead: while it is closed no engine starts an async copy (the
 * plugins' barrier/marker copies included), so copies stay pending and
 * their completion signals keep their values, for as long as the test
 * wants; when it opens, the copies held are performed newest first, as far
 * as their dependent signals allow. A device busy with other work does the
 * same: the reference promises that a copy starts after its dependencies,
 * never by when, nor in which order unrelated copies complete.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int hsa_status_t;
enum {
    HSA_STATUS_SUCCESS = 0x0,
    HSA_STATUS_INFO_BREAK = 0x1,
    HSA_STATUS_ERROR = 0x1000,
    HSA_STATUS_ERROR_INVALID_ARGUMENT = 0x1001,
    HSA_STATUS_ERROR_INVALID_QUEUE_CREATION = 0x1002,
    HSA_STATUS_ERROR_INVALID_ALLOCATION = 0x1003,
    HSA_STATUS_ERROR_INVALID_AGENT = 0x1004,
    HSA_STATUS_ERROR_INVALID_REGION = 0x1005,
    HSA_STATUS_ERROR_INVALID_SIGNAL = 0x1006,
    HSA_STATUS_ERROR_INVALID_QUEUE = 0x1007,
    HSA_STATUS_ERROR_OUT_OF_RESOURCES = 0x1008,
    HSA_STATUS_ERROR_INVALID_PACKET_FORMAT = 0x1009,
    HSA_STATUS_ERROR_RESOURCE_FREE = 0x100A,
    HSA_STATUS_ERROR_NOT_INITIALIZED = 0x100B,
    HSA_STATUS_ERROR_REFCOUNT_OVERFLOW = 0x100C,
    HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS = 0x100D,
    HSA_STATUS_ERROR_INVALID_INDEX = 0x100E,
    HSA_STATUS_ERROR_INVALID_ISA = 0x100F,
    HSA_STATUS_ERROR_INVALID_CODE_OBJECT = 0x1010,
    HSA_STATUS_ERROR_INVALID_EXECUTABLE = 0x1011,
    HSA_STATUS_ERROR_FROZEN_EXECUTABLE = 0x1012,
    HSA_STATUS_ERROR_INVALID_SYMBOL_NAME = 0x1013,
    HSA_STATUS_ERROR_VARIABLE_ALREADY_DEFINED = 0x1014,
    HSA_STATUS_ERROR_VARIABLE_UNDEFINED = 0x1015,
    HSA_STATUS_ERROR_EXCEPTION = 0x1016,
};

typedef struct hsa_agent_s { uint64_t handle; } hsa_agent_t;
typedef struct hsa_amd_memory_pool_s { uint64_t handle; } hsa_amd_memory_pool_t;
typedef struct hsa_signal_s { uint64_t handle; } hsa_signal_t;
typedef int64_t hsa_signal_value_t;

enum { HSA_DEVICE_TYPE_CPU = 0, HSA_DEVICE_TYPE_GPU = 1 };
enum { /* hsa_system_info_t */
    HSA_SYSTEM_INFO_VERSION_MAJOR = 0,
    HSA_SYSTEM_INFO_VERSION_MINOR = 1,
    HSA_SYSTEM_INFO_TIMESTAMP = 2,
    HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY = 3,
};
enum { /* hsa_agent_info_t, hsa_amd_agent_info_t */
    HSA_AGENT_INFO_NAME = 0,
    HSA_AGENT_INFO_VENDOR_NAME = 1,
    HSA_AGENT_INFO_PROFILE = 4, /* hsa_profile_t: 0 base, 1 full */
    HSA_AGENT_INFO_NODE = 16,
    HSA_AGENT_INFO_DEVICE = 17,
    HSA_AMD_AGENT_INFO_BDFID = 0xA006, /* uint32_t (uint16_t in old headers) */
    HSA_AMD_AGENT_INFO_PRODUCT_NAME = 0xA009,
    HSA_AMD_AGENT_INFO_DOMAIN = 0xA00F, /* uint32_t */
    HSA_AMD_AGENT_INFO_MEMORY_AVAIL = 0xA015, /* uint64_t */
};
enum { /* hsa_amd_segment_t */
    HSA_AMD_SEGMENT_GLOBAL = 0,
    HSA_AMD_SEGMENT_GROUP = 3,
};
enum { /* hsa_amd_memory_pool_global_flag_t */
    FLAG_KERNARG_INIT = 1,
    FLAG_FINE_GRAINED = 2,
    FLAG_COARSE_GRAINED = 4,
};
enum { /* hsa_amd_memory_pool_info_t */
    POOL_INFO_SEGMENT = 0,
    POOL_INFO_GLOBAL_FLAGS = 1,
    POOL_INFO_SIZE = 2,
    POOL_INFO_RUNTIME_ALLOC_ALLOWED = 5,
    POOL_INFO_RUNTIME_ALLOC_GRANULE = 6,
    POOL_INFO_RUNTIME_ALLOC_ALIGNMENT = 7,
    POOL_INFO_ACCESSIBLE_BY_ALL = 15,
};
enum { /* hsa_amd_pointer_type_t */
    HSA_EXT_POINTER_TYPE_UNKNOWN = 0,
    HSA_EXT_POINTER_TYPE_HSA = 1,
    HSA_EXT_POINTER_TYPE_LOCKED = 2,
};
enum { /* hsa_signal_condition_t */
    COND_EQ = 0, COND_NE = 1, COND_LT = 2, COND_GTE = 3,
};

/* hsa_amd_pointer_info_t as in ROCm 5.x; its first field is set by the caller
 * to the size it allocated, and the runtime fills no more than that. */
typedef struct hsa_amd_pointer_info_s {
    uint32_t size;
    uint32_t type;
    void *agentBaseAddress;
    void *hostBaseAddress;
    size_t sizeInBytes;
    void *userData;
    hsa_agent_t agentOwner;
    uint32_t global_flags;
} hsa_amd_pointer_info_t;

/* The smallest size accepted: the first revision ends after sizeInBytes. */
#define POINTER_INFO_V1_SIZE (offsetof(hsa_amd_pointer_info_t, sizeInBytes) + sizeof(size_t))

#define MAX_GPUS 16
#define MAX_AGENTS (MAX_GPUS + 1)
#define POOLS_PER_AGENT 3
#define AGENT_BASE 0xA6E0000000ull
#define POOL_BASE 0x9001000000ull
#define DEV_BIAS (1ull << 62)
#define LOCK_BIAS (1ull << 61)
#define GRANULE 4096u

struct agent {
    int type;
    char name[64], product[64];
    bool has_pci; /* FAKEHSA_PCI */
    uint32_t bdfid, domain;
    int npools;
    int pools[POOLS_PER_AGENT];
};
struct pool {
    int agent;
    int segment;
    uint32_t flags;
    size_t size, used;
    bool alloc_allowed;
};
struct alloc {
    uintptr_t addr; /* what the caller sees */
    void *real;
    size_t size;
    int pool;
    uint64_t access; /* bit per agent index */
};
struct lock {
    uintptr_t host, agent;
    size_t size;
    uint64_t access; /* bit per agent index: the agents the lock maps it for */
};

#define SIG_MAGIC 0x5157A1u
struct sig {
    uint32_t magic;
    int live;
    int64_t value;
    int waiters; /* threads in hsa_signal_wait_scacquire on it */
    bool copied;                /* the completion signal of an async copy (ROCr: async_copy_agent set) */
    uint64_t start_ts, end_ts;  /* the last profiled copy's timestamps, system domain */
    struct sig *next_free;
};
#define SLAB 1024
struct slab {
    struct sig sigs[SLAB];
    struct slab *next;
};

struct job {
    void *dst, *src;
    size_t size;
    struct sig *done;
    int ndeps;
    struct sig **deps;
    struct timespec due;
    bool running; /* taken by an engine: its dependencies were all 0 */
    bool profiled; /* submitted while hsa_amd_profiling_async_copy_enable(true) held */
    struct job *next;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sig_cv = PTHREAD_COND_INITIALIZER; /* a signal changed */
static pthread_cond_t job_cv; /* a job was queued or completed (CLOCK_MONOTONIC, init_engines) */

static int refs;
static bool copy_profiling; /* hsa_amd_profiling_async_copy_enable */
static int nagents;
static struct agent agents[MAX_AGENTS];
static int npools;
static struct pool pools[MAX_AGENTS * POOLS_PER_AGENT];
static long delay_us = 2000;
static int nengines = 2; /* FAKEHSA_ENGINES: copy workers (read at hsa_init; started at the first copy) */
static bool no_peer; /* FAKEHSA_NO_PEER: GPUs cannot reach each other's memory */
static bool apu;     /* FAKEHSA_APU: full-profile GPUs */

static struct alloc *allocs;
static int nallocs, capallocs;
static int64_t alloc_calls; /* successful hsa_amd_memory_pool_allocate calls (test hook) */
static struct lock *locks;
static int nlocks, caplocks;

static struct slab *slabs;
static struct sig *free_sigs;
static int64_t live_sigs;
/* Test hooks "waiting" (threads in hsa_signal_wait_scacquire) and
 * "waited_destroys" (hsa_signal_destroy of a signal another thread waits
 * on: the real runtime's waiter would then read freed memory). */
static int64_t waiting, waited_destroys;

/* Every submitted copy, in submission order, until it completed (running
 * ones included, so that hsa_signal_destroy sees their signals in use). */
static struct job *jobs_head, *jobs_tail;
static int64_t jobs_pending, copies_done, lock_calls, unlock_calls, stray_unlocks;
static bool workers_started;

/* ---- configuration and error injection ---- */

static long env_long(const char *name, long def, long lo, long hi) {
    const char *v = getenv(name);
    if (v == NULL || *v == 0) return def;
    char *end;
    long x = strtol(v, &end, 0);
    if (*end != 0 || x < lo || x > hi) return def;
    return x;
}

#define MAX_FAILS 16
static pthread_mutex_t fail_mu = PTHREAD_MUTEX_INITIALIZER;
static char fail_spec[1024];
static struct {
    char fn[64];
    long nth; /* 0: every call */
    int code;
    long calls;
} fails[MAX_FAILS];
static int nfails;

static void parse_fails(const char *spec) {
    nfails = 0;
    snprintf(fail_spec, sizeof fail_spec, "%s", spec);
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL && nfails < MAX_FAILS;
         tok = strtok_r(NULL, ",", &save)) {
        char *c1 = strchr(tok, ':');
        if (c1 == NULL) continue;
        *c1 = 0;
        char *n = c1 + 1, *c2 = strchr(n, ':');
        int code = HSA_STATUS_ERROR_OUT_OF_RESOURCES;
        if (c2 != NULL) {
            *c2 = 0;
            code = (int)strtol(c2 + 1, NULL, 0);
        }
        long nth = strcmp(n, "*") == 0 ? 0 : strtol(n, NULL, 10);
        if (nth < 0) continue;
        snprintf(fails[nfails].fn, sizeof fails[nfails].fn, "%s", tok);
        fails[nfails].nth = nth;
        fails[nfails].code = code;
        fails[nfails].calls = 0;
        nfails++;
    }
}

/* injected returns the status the call of fn must fail with, or 0. */
static hsa_status_t injected(const char *fn) {
    const char *spec = getenv("FAKEHSA_FAIL");
    if (spec == NULL) spec = "";
    hsa_status_t st = HSA_STATUS_SUCCESS;
    pthread_mutex_lock(&fail_mu);
    if (strncmp(spec, fail_spec, sizeof fail_spec - 1) != 0) parse_fails(spec);
    for (int i = 0; i < nfails; i++) {
        if (strcmp(fails[i].fn, fn) != 0) continue;
        fails[i].calls++;
        if (fails[i].nth == 0 || fails[i].nth == fails[i].calls) st = fails[i].code;
    }
    pthread_mutex_unlock(&fail_mu);
    return st;
}

#define ENTER(fn)                                                   \
    do {                                                            \
        if (!initialized()) return HSA_STATUS_ERROR_NOT_INITIALIZED; \
        hsa_status_t inj_ = injected(fn);                           \
        if (inj_ != HSA_STATUS_SUCCESS) return inj_;                \
    } while (0)

static bool initialized(void) {
    pthread_mutex_lock(&mu);
    bool ok = refs > 0;
    pthread_mutex_unlock(&mu);
    return ok;
}

/* ---- handles ---- */

static int agent_index(hsa_agent_t a) {
    if (a.handle < AGENT_BASE || a.handle >= AGENT_BASE + (uint64_t)nagents) return -1;
    return (int)(a.handle - AGENT_BASE);
}

static int pool_index(hsa_amd_memory_pool_t p) {
    if (p.handle < POOL_BASE || p.handle >= POOL_BASE + (uint64_t)npools) return -1;
    return (int)(p.handle - POOL_BASE);
}

static int add_pool(int agent, int segment, uint32_t flags, size_t size, bool alloc) {
    int i = npools++;
    pools[i] = (struct pool){.agent = agent, .segment = segment, .flags = flags, .size = size, .alloc_allowed = alloc};
    agents[agent].pools[agents[agent].npools++] = i;
    return i;
}

static void configure(void) {
    int gpus = (int)env_long("FAKEHSA_GPUS", 2, 0, MAX_GPUS);
    delay_us = env_long("FAKEHSA_COPY_DELAY_US", 2000, 0, 60000000);
    nengines = (int)env_long("FAKEHSA_ENGINES", 2, 1, 16);
    no_peer = env_long("FAKEHSA_NO_PEER", 0, 0, 1) == 1;
    apu = env_long("FAKEHSA_APU", 0, 0, 1) == 1;
    size_t vram = (size_t)env_long("FAKEHSA_VRAM_MB", 1024, 1, 1 << 20) << 20;
    nagents = 0;
    npools = 0;
    memset(agents, 0, sizeof agents);
    struct agent *cpu = &agents[nagents++];
    cpu->type = HSA_DEVICE_TYPE_CPU;
    snprintf(cpu->name, sizeof cpu->name, "Fake HSA CPU");
    snprintf(cpu->product, sizeof cpu->product, "Fake HSA CPU");
    add_pool(0, HSA_AMD_SEGMENT_GLOBAL, FLAG_KERNARG_INIT | FLAG_FINE_GRAINED, (size_t)64 << 30, true);
    add_pool(0, HSA_AMD_SEGMENT_GLOBAL, FLAG_COARSE_GRAINED, (size_t)64 << 30, true);
    for (int g = 0; g < gpus; g++) {
        int i = nagents++;
        agents[i].type = HSA_DEVICE_TYPE_GPU;
        snprintf(agents[i].name, sizeof agents[i].name, "gfx90a");
        snprintf(agents[i].product, sizeof agents[i].product, "Fake AMD Instinct MI210");
        add_pool(i, HSA_AMD_SEGMENT_GLOBAL, FLAG_COARSE_GRAINED, vram, true);
        add_pool(i, HSA_AMD_SEGMENT_GLOBAL, FLAG_FINE_GRAINED, vram / 4, true);
        add_pool(i, HSA_AMD_SEGMENT_GROUP, 0, 64 << 10, false);
    }
    for (const char *nc = getenv("FAKEHSA_NO_COARSE_GPUS"); nc != NULL && *nc != 0;) {
        char *end;
        long g = strtol(nc, &end, 10);
        if (end == nc) break;
        if (g >= 0 && g < gpus) pools[agents[1 + g].pools[0]].alloc_allowed = false;
        nc = *end == ',' ? end + 1 : end;
    }
    const char *pci = getenv("FAKEHSA_PCI");
    for (int g = 0; pci && *pci && g < gpus; g++) {
        unsigned dom, bus, dev, fn;
        if (sscanf(pci, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) == 4) {
            struct agent *a = &agents[1 + g];
            a->has_pci = true;
            a->domain = dom;
            a->bdfid = (bus & 0xff) << 8 | (dev & 0x1f) << 3 | (fn & 7);
        }
        const char *end = strchr(pci, ',');
        pci = end ? end + 1 : "";
    }
}

/* ---- gates (test hook fakehsa_gate) ---- */

enum { GATE_LOCK, GATE_UNLOCK, GATE_COPY, NGATES };
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static bool gate_closed[NGATES];
static int64_t gated;

/* gate_wait holds a call while its gate is closed, with no lock of the fake
 * held, as a call that waits for the device does. */
static void gate_wait(int g) {
    pthread_mutex_lock(&gate_mu);
    if (gate_closed[g]) {
        gated++;
        while (gate_closed[g]) pthread_cond_wait(&gate_cv, &gate_mu);
        gated--;
    }
    pthread_mutex_unlock(&gate_mu);
}

void fakehsa_gate(const char *fn, int closed) {
    int g = strcmp(fn, "hsa_amd_memory_lock") == 0     ? GATE_LOCK
            : strcmp(fn, "hsa_amd_memory_unlock") == 0 ? GATE_UNLOCK
            : strcmp(fn, "copy") == 0                  ? GATE_COPY
                                                       : -1;
    if (g < 0) return;
    pthread_mutex_lock(&gate_mu);
    gate_closed[g] = closed != 0;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}

/* ---- init ---- */

hsa_status_t hsa_init(void) {
    hsa_status_t inj = injected("hsa_init");
    if (inj != HSA_STATUS_SUCCESS) return inj;
    const char *nokfd = getenv("FAKEHSA_NO_KFD");
    if (nokfd != NULL && strcmp(nokfd, "1") == 0) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    pthread_mutex_lock(&mu);
    if (refs == 0) configure();
    refs++;
    pthread_mutex_unlock(&mu);
    return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_shut_down(void) {
    pthread_mutex_lock(&mu);
    if (refs == 0) {
        pthread_mutex_unlock(&mu);
        return HSA_STATUS_ERROR_NOT_INITIALIZED;
    }
    refs--;
    pthread_mutex_unlock(&mu);
    return HSA_STATUS_SUCCESS;
}

static const struct {
    hsa_status_t code;
    const char *text;
} status_texts[] = {
    {HSA_STATUS_SUCCESS, "HSA_STATUS_SUCCESS: The function has been executed successfully."},
    {HSA_STATUS_INFO_BREAK, "HSA_STATUS_INFO_BREAK: A traversal over a list of elements has been interrupted by the application before completing."},
    {HSA_STATUS_ERROR, "HSA_STATUS_ERROR: A generic error has occurred."},
    {HSA_STATUS_ERROR_INVALID_ARGUMENT, "HSA_STATUS_ERROR_INVALID_ARGUMENT: One of the actual arguments does not meet a precondition stated in the documentation of the corresponding formal argument."},
    {HSA_STATUS_ERROR_INVALID_QUEUE_CREATION, "HSA_STATUS_ERROR_INVALID_QUEUE_CREATION: The requested queue creation is not valid."},
    {HSA_STATUS_ERROR_INVALID_ALLOCATION, "HSA_STATUS_ERROR_INVALID_ALLOCATION: The requested allocation is not valid."},
    {HSA_STATUS_ERROR_INVALID_AGENT, "HSA_STATUS_ERROR_INVALID_AGENT: The agent is invalid."},
    {HSA_STATUS_ERROR_INVALID_REGION, "HSA_STATUS_ERROR_INVALID_REGION: The memory region is invalid."},
    {HSA_STATUS_ERROR_INVALID_SIGNAL, "HSA_STATUS_ERROR_INVALID_SIGNAL: The signal is invalid."},
    {HSA_STATUS_ERROR_INVALID_QUEUE, "HSA_STATUS_ERROR_INVALID_QUEUE: The queue is invalid."},
    {HSA_STATUS_ERROR_OUT_OF_RESOURCES, "HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources. This error may also occur when the core runtime library needs to spawn threads or create internal OS-specific events."},
    {HSA_STATUS_ERROR_INVALID_PACKET_FORMAT, "HSA_STATUS_ERROR_INVALID_PACKET_FORMAT: The AQL packet is malformed."},
    {HSA_STATUS_ERROR_RESOURCE_FREE, "HSA_STATUS_ERROR_RESOURCE_FREE: An error has been detected while releasing a resource."},
    {HSA_STATUS_ERROR_NOT_INITIALIZED, "HSA_STATUS_ERROR_NOT_INITIALIZED: An API other than hsa_init has been invoked while the reference count of the HSA runtime is zero."},
    {HSA_STATUS_ERROR_REFCOUNT_OVERFLOW, "HSA_STATUS_ERROR_REFCOUNT_OVERFLOW: The maximum reference count for the object has been reached."},
    {HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS, "HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS: The arguments passed to a functions are not compatible."},
    {HSA_STATUS_ERROR_INVALID_INDEX, "HSA_STATUS_ERROR_INVALID_INDEX: The index is invalid."},
    {HSA_STATUS_ERROR_INVALID_ISA, "HSA_STATUS_ERROR_INVALID_ISA: The instruction set architecture is invalid."},
    {HSA_STATUS_ERROR_INVALID_CODE_OBJECT, "HSA_STATUS_ERROR_INVALID_CODE_OBJECT: The code object is invalid."},
    {HSA_STATUS_ERROR_INVALID_EXECUTABLE, "HSA_STATUS_ERROR_INVALID_EXECUTABLE: The executable is invalid."},
    {HSA_STATUS_ERROR_FROZEN_EXECUTABLE, "HSA_STATUS_ERROR_FROZEN_EXECUTABLE: The executable is frozen."},
    {HSA_STATUS_ERROR_INVALID_SYMBOL_NAME, "HSA_STATUS_ERROR_INVALID_SYMBOL_NAME: There is no symbol with the given name."},
    {HSA_STATUS_ERROR_VARIABLE_ALREADY_DEFINED, "HSA_STATUS_ERROR_VARIABLE_ALREADY_DEFINED: The variable is already defined."},
    {HSA_STATUS_ERROR_VARIABLE_UNDEFINED, "HSA_STATUS_ERROR_VARIABLE_UNDEFINED: The variable is undefined."},
    {HSA_STATUS_ERROR_EXCEPTION, "HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception."},
};

/* Callable before hsa_init, like the real one. */
hsa_status_t hsa_status_string(hsa_status_t status, const char **status_string) {
    if (status_string == NULL) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    for (size_t i = 0; i < sizeof status_texts / sizeof status_texts[0]; i++) {
        if (status_texts[i].code == status) {
            *status_string = status_texts[i].text;
            return HSA_STATUS_SUCCESS;
        }
    }
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
}

/* now_ns is the HSA system clock here: HSA_SYSTEM_INFO_TIMESTAMP's. */
static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

hsa_status_t hsa_system_get_info(int attribute, void *value) {
    ENTER("hsa_system_get_info");
    if (value == NULL) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    switch (attribute) {
    case HSA_SYSTEM_INFO_VERSION_MAJOR: *(uint16_t *)value = 1; return HSA_STATUS_SUCCESS;
    case HSA_SYSTEM_INFO_VERSION_MINOR: *(uint16_t *)value = 1; return HSA_STATUS_SUCCESS;
    case HSA_SYSTEM_INFO_TIMESTAMP: *(uint64_t *)value = now_ns(); return HSA_STATUS_SUCCESS;
    case HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY: *(uint64_t *)value = 1000000000ull; return HSA_STATUS_SUCCESS;
    }
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
}

/* ---- agents and pools ---- */

typedef hsa_status_t (*agent_cb)(hsa_agent_t agent, void *data);
typedef hsa_status_t (*pool_cb)(hsa_amd_memory_pool_t pool, void *data);

hsa_status_t hsa_iterate_agents(agent_cb callback, void *data) {
    ENTER("hsa_iterate_agents");
    if (callback == NULL) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < nagents; i++) {
        hsa_status_t st = callback((hsa_agent_t){AGENT_BASE + (uint64_t)i}, data);
        if (st != HSA_STATUS_SUCCESS) return st;
    }
    return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_agent_get_info(hsa_agent_t agent, int attribute, void *value) {
    ENTER("hsa_agent_get_info");
    int i = agent_index(agent);
    if (i < 0) return HSA_STATUS_ERROR_INVALID_AGENT;
    if (value == NULL) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    switch (attribute) {
    case HSA_AGENT_INFO_NAME: memcpy(value, agents[i].name, 64); return HSA_STATUS_SUCCESS;
    case HSA_AGENT_INFO_VENDOR_NAME:
        memset(value, 0, 64);
        strcpy(value, agents[i].type == HSA_DEVICE_TYPE_GPU ? "AMD" : "CPU");
        return HSA_STATUS_SUCCESS;
    case HSA_AGENT_INFO_PROFILE:
        *(uint32_t *)value = agents[i].type == HSA_DEVICE_TYPE_GPU && apu ? 1 : 0;
        return HSA_STATUS_SUCCESS;
    case HSA_AGENT_INFO_NODE: *(uint32_t *)value = (uint32_t)i; return HSA_STATUS_SUCCESS;
    case HSA_AGENT_INFO_DEVICE: *(uint32_t *)value = (uint32_t)agents[i].type; return HSA_STATUS_SUCCESS;
    case HSA_AMD_AGENT_INFO_PRODUCT_NAME: memcpy(value, agents[i].product, 64); return HSA_STATUS_SUCCESS;
    case HSA_AMD_AGENT_INFO_BDFID:
        if (!agents[i].has_pci) break;
        *(uint32_t *)value = agents[i].bdfid;
        return HSA_STATUS_SUCCESS;
    case HSA_AMD_AGENT_INFO_DOMAIN:
        if (!agents[i].has_pci) break;
        *(uint32_t *)value = agents[i].domain;
        return HSA_STATUS_SUCCESS;
    case HSA_AMD_AGENT_INFO_MEMORY_AVAIL: {
        /* hsa_ext_amd.h: "Queries the amount of memory available in bytes
         * accross all global pools owned by the agent. The type of this
         * attribute is uint64_t." The fake's two VRAM pools of a GPU stand
         * for one memory, as a real GPU's coarse- and fine-grained pools
         * do: what is available is the coarse pool's size less what both
         * hold. FAKEHSA_NO_MEMORY_AVAIL=1 answers as a runtime that lacks
         * the attribute (HSA_STATUS_ERROR_INVALID_ARGUMENT). */
        const char *old_rt = getenv("FAKEHSA_NO_MEMORY_AVAIL");
        if (agents[i].type != HSA_DEVICE_TYPE_GPU || (old_rt != NULL && strcmp(old_rt, "1") == 0)) break;
        uint64_t size = 0, used = 0;
        pthread_mutex_lock(&mu);
        for (int k = 0; k < agents[i].npools; k++) {
            struct pool *pl = &pools[agents[i].pools[k]];
            if (pl->segment != HSA_AMD_SEGMENT_GLOBAL) continue;
            if (pl->flags & FLAG_COARSE_GRAINED) size = pl->size;
            used += pl->used;
        }
        pthread_mutex_unlock(&mu);
        *(uint64_t *)value = used < size ? size - used : 0;
        return HSA_STATUS_SUCCESS;
    }
    }
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
}

hsa_status_t hsa_amd_agent_iterate_memory_pools(hsa_agent_t agent, pool_cb callback, void *data) {
    ENTER("hsa_amd_agent_iterate_memory_pools");
    int i = agent_index(agent);
    if (i < 0) return HSA_STATUS_ERROR_INVALID_AGENT;
    if (callback == NULL) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    for (int k = 0; k < agents[i].npools; k++) {
        hsa_status_t st = callback((hsa_amd_memory_pool_t){POOL_BASE + (uint64_t)agents[i].pools[k]}, data);
        if (st != HSA_STATUS_SUCCESS) return st;
    }
    return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_memory_pool_get_info(hsa_amd_memory_pool_t pool, int attribute, void *value) {
    ENTER("hsa_amd_memory_pool_get_info");
    int i = pool_index(pool);
    if (i < 0) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    if (value == NULL) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    struct pool *p = &pools[i];
    switch (attribute) {
    case POOL_INFO_SEGMENT: *(int *)value = p->segment; return HSA_STATUS_SUCCESS;
    case POOL_INFO_GLOBAL_FLAGS:
        if (p->segment != HSA_AMD_SEGMENT_GLOBAL) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        *(uint32_t *)value = p->flags;
        return HSA_STATUS_SUCCESS;
    case POOL_INFO_SIZE: *(size_t *)value = p->size; return HSA_STATUS_SUCCESS;
    case POOL_INFO_RUNTIME_ALLOC_ALLOWED: *(bool *)value = p->alloc_allowed; return HSA_STATUS_SUCCESS;
    case POOL_INFO_RUNTIME_ALLOC_GRANULE:
    case POOL_INFO_RUNTIME_ALLOC_ALIGNMENT: *(size_t *)value = GRANULE; return HSA_STATUS_SUCCESS;
    case POOL_INFO_ACCESSIBLE_BY_ALL: *(bool *)value = false; return HSA_STATUS_SUCCESS;
    }
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
}

/* ---- memory ---- */

static struct alloc *find_alloc_locked(uintptr_t p, size_t n) {
    for (int i = 0; i < nallocs; i++) {
        struct alloc *a = &allocs[i];
        if (p >= a->addr && p - a->addr < a->size) return (n <= a->size - (p - a->addr)) ? a : NULL;
    }
    return NULL;
}

static bool overlaps_alloc_locked(uintptr_t p, size_t n) {
    for (int i = 0; i < nallocs; i++) {
        uintptr_t a = allocs[i].addr;
        if (p < a + allocs[i].size && a < p + n) return true;
    }
    return false;
}

hsa_status_t hsa_amd_memory_pool_allocate(hsa_amd_memory_pool_t pool, size_t size, uint32_t flags, void **ptr) {
    ENTER("hsa_amd_memory_pool_allocate");
    (void)flags;
    int i = pool_index(pool);
    if (i < 0 || size == 0 || ptr == NULL) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    struct pool *pl = &pools[i];
    if (!pl->alloc_allowed) return HSA_STATUS_ERROR_INVALID_ALLOCATION;
    if (size > pl->size) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    size_t rounded = (size + GRANULE - 1) / GRANULE * GRANULE;
    pthread_mutex_lock(&mu);
    if (rounded > pl->size - pl->used) {
        pthread_mutex_unlock(&mu);
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    void *real = NULL;
    if (posix_memalign(&real, GRANULE, rounded) != 0) {
        pthread_mutex_unlock(&mu);
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    bool device = agents[pl->agent].type == HSA_DEVICE_TYPE_GPU && (pl->flags & FLAG_COARSE_GRAINED);
    if (device) memset(real, 0xCD, rounded); /* fresh device memory is not zeroed */
    if (nallocs == capallocs) {
        capallocs = capallocs ? 2 * capallocs : 64;
        allocs = realloc(allocs, (size_t)capallocs * sizeof *allocs);
    }
    uintptr_t addr = (uintptr_t)real + (device ? DEV_BIAS : 0);
    allocs[nallocs++] = (struct alloc){.addr = addr, .real = real, .size = rounded, .pool = i,
                                       .access = 1ull << pl->agent};
    pl->used += rounded;
    alloc_calls++;
    pthread_mutex_unlock(&mu);
    *ptr = (void *)addr;
    return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_memory_pool_free(void *ptr) {
    ENTER("hsa_amd_memory_pool_free");
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nallocs; i++) {
        if (allocs[i].addr == (uintptr_t)ptr) {
            pools[allocs[i].pool].used -= allocs[i].size;
            free(allocs[i].real);
            allocs[i] = allocs[--nallocs];
            pthread_mutex_unlock(&mu);
            return HSA_STATUS_SUCCESS;
        }
    }
    pthread_mutex_unlock(&mu);
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
}

enum { /* hsa_amd_memory_pool_access_t */
    ACCESS_NEVER_ALLOWED = 0,
    ACCESS_ALLOWED_BY_DEFAULT = 1,
    ACCESS_DISALLOWED_BY_DEFAULT = 2,
};

/* pool_access is how agent a may reach buffers of pool p: its own pools by
 * default, the CPU's pools and other GPUs' pools after
 * hsa_amd_agents_allow_access (never with FAKEHSA_NO_PEER=1), GPU pools
 * never from the CPU. */
static int pool_access(int a, int p) {
    int owner = pools[p].agent;
    if (owner == a) return ACCESS_ALLOWED_BY_DEFAULT;
    if (agents[a].type == HSA_DEVICE_TYPE_CPU) return ACCESS_NEVER_ALLOWED;
    if (agents[owner].type == HSA_DEVICE_TYPE_GPU && no_peer) return ACCESS_NEVER_ALLOWED;
    return ACCESS_DISALLOWED_BY_DEFAULT;
}

enum { AGENT_POOL_INFO_ACCESS = 0 }; /* hsa_amd_agent_memory_pool_info_t */

hsa_status_t hsa_amd_agent_memory_pool_get_info(hsa_agent_t agent, hsa_amd_memory_pool_t pool, int attribute,
                                                void *value) {
    ENTER("hsa_amd_agent_memory_pool_get_info");
    int a = agent_index(agent), p = pool_index(pool);
    if (a < 0) return HSA_STATUS_ERROR_INVALID_AGENT;
    if (p < 0 || value == NULL) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    if (attribute != AGENT_POOL_INFO_ACCESS) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    *(uint32_t *)value = (uint32_t)pool_access(a, p);
    return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_agents_allow_access(uint32_t num_agents, const hsa_agent_t *agents_, const uint32_t *flags,
                                         const void *ptr) {
    ENTER("hsa_amd_agents_allow_access");
    (void)flags;
    if (num_agents == 0 || agents_ == NULL || ptr == NULL) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    uint64_t mask = 0;
    for (uint32_t k = 0; k < num_agents; k++) {
        int i = agent_index(agents_[k]);
        if (i < 0) return HSA_STATUS_ERROR_INVALID_AGENT;
        mask |= 1ull << i;
    }
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nallocs; i++) {
        if (allocs[i].addr == (uintptr_t)ptr) {
            for (int k = 0; k < nagents; k++) {
                if (((mask >> k) & 1) && pool_access(k, allocs[i].pool) == ACCESS_NEVER_ALLOWED) {
                    pthread_mutex_unlock(&mu);
                    return HSA_STATUS_ERROR_INVALID_AGENT;
                }
            }
            allocs[i].access |= mask;
            pthread_mutex_unlock(&mu);
            return HSA_STATUS_SUCCESS;
        }
    }
    pthread_mutex_unlock(&mu);
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
}

hsa_status_t hsa_amd_memory_lock(void *host_ptr, size_t size, hsa_agent_t *agents_, int num_agent,
                                 void **agent_ptr) {
    ENTER("hsa_amd_memory_lock");
    gate_wait(GATE_LOCK);
    if (host_ptr == NULL || size == 0 || agent_ptr == NULL || num_agent < 0) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    if (num_agent > 0 && agents_ == NULL) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    uint64_t access = 0;
    for (int k = 0; k < num_agent; k++) {
        int a = agent_index(agents_[k]);
        if (a < 0) return HSA_STATUS_ERROR_INVALID_AGENT;
        access |= 1ull << a;
    }
    if (num_agent == 0) access = (1ull << nagents) - 1; /* NULL, 0: every agent */
    uintptr_t h = (uintptr_t)host_ptr;
    if (h + size < h || (h & (DEV_BIAS | LOCK_BIAS))) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    if (apu) {
        /* MemoryRegion::Lock: "For APU, any host pointer is always accessible
         * by the gpu": *agent_ptr = host_ptr, nothing registered. */
        pthread_mutex_lock(&mu);
        lock_calls++;
        pthread_mutex_unlock(&mu);
        *agent_ptr = host_ptr;
        return HSA_STATUS_SUCCESS;
    }
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nlocks; i++) {
        struct lock *l = &locks[i];
        if (l->host == h && l->size == size) {
            /* Registered and mapped again: one lock, not a count (see the
             * file comment); the first unlock ends it. */
            l->access |= access;
            lock_calls++;
            *agent_ptr = (void *)l->agent;
            pthread_mutex_unlock(&mu);
            return HSA_STATUS_SUCCESS;
        }
        if (h < l->host + l->size && l->host < h + size) {
            pthread_mutex_unlock(&mu);
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
    }
    if (overlaps_alloc_locked(h, size)) {
        pthread_mutex_unlock(&mu);
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    if (nlocks == caplocks) {
        caplocks = caplocks ? 2 * caplocks : 64;
        locks = realloc(locks, (size_t)caplocks * sizeof *locks);
    }
    locks[nlocks++] = (struct lock){.host = h, .agent = h + LOCK_BIAS, .size = size, .access = access};
    lock_calls++;
    pthread_mutex_unlock(&mu);
    *agent_ptr = (void *)(h + LOCK_BIAS);
    return HSA_STATUS_SUCCESS;
}

/* MemoryRegion::Unlock ignores what MakeKfdMemoryUnresident and
 * DeregisterMemory find and returns HSA_STATUS_SUCCESS: unlocking memory that
 * is not locked (or an interior pointer) succeeds and does nothing. The one
 * unlock of a range unmaps it whatever number of locks preceded. */
hsa_status_t hsa_amd_memory_unlock(void *host_ptr) {
    ENTER("hsa_amd_memory_unlock");
    gate_wait(GATE_UNLOCK);
    pthread_mutex_lock(&mu);
    unlock_calls++;
    bool found = false;
    for (int i = 0; i < nlocks && !apu; i++) {
        if (locks[i].host == (uintptr_t)host_ptr) {
            locks[i] = locks[--nlocks];
            found = true;
            break;
        }
    }
    if (!found && !apu) stray_unlocks++;
    pthread_mutex_unlock(&mu);
    return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_pointer_info(const void *ptr, hsa_amd_pointer_info_t *info, void *(*alloc)(size_t),
                                  uint32_t *num_agents_accessible, hsa_agent_t **accessible) {
    ENTER("hsa_amd_pointer_info");
    if (info == NULL || info->size < POINTER_INFO_V1_SIZE) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    hsa_amd_pointer_info_t r;
    memset(&r, 0, sizeof r);
    uint64_t access = 0;
    uintptr_t p = (uintptr_t)ptr;
    /* Locks made through the KFD SVM API are not in libhsakmt's pointer
     * table: the runtime cannot describe them. */
    const char *svm = getenv("FAKEHSA_SVM");
    bool locks_known = svm == NULL || strcmp(svm, "1") != 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nlocks && locks_known; i++) {
        struct lock *l = &locks[i];
        if ((p >= l->host && p - l->host < l->size) || (p >= l->agent && p - l->agent < l->size)) {
            r.type = HSA_EXT_POINTER_TYPE_LOCKED;
            r.hostBaseAddress = (void *)l->host;
            r.agentBaseAddress = (void *)l->agent;
            r.sizeInBytes = l->size;
            r.agentOwner = (hsa_agent_t){AGENT_BASE};
            r.global_flags = FLAG_FINE_GRAINED;
            access = (1ull << nagents) - 1;
            break;
        }
    }
    if (r.type == HSA_EXT_POINTER_TYPE_UNKNOWN) {
        struct alloc *a = find_alloc_locked(p, 1);
        if (a != NULL) {
            struct pool *pl = &pools[a->pool];
            r.type = HSA_EXT_POINTER_TYPE_HSA;
            r.agentBaseAddress = (void *)a->addr;
            /* Every pool allocation, VRAM included (see the file comment). */
            r.hostBaseAddress = (void *)a->addr;
            r.sizeInBytes = a->size;
            r.agentOwner = (hsa_agent_t){AGENT_BASE + (uint64_t)pl->agent};
            r.global_flags = pl->flags;
            access = a->access;
        }
    }
    pthread_mutex_unlock(&mu);
    uint32_t n = info->size < sizeof r ? info->size : (uint32_t)sizeof r;
    r.size = n;
    memcpy(info, &r, n);
    if (num_agents_accessible != NULL || accessible != NULL) {
        if (num_agents_accessible == NULL || accessible == NULL || alloc == NULL)
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        uint32_t count = 0;
        for (int i = 0; i < nagents; i++) count += (access >> i) & 1;
        *num_agents_accessible = count;
        *accessible = count ? alloc(count * sizeof(hsa_agent_t)) : NULL;
        for (int i = 0, k = 0; i < nagents && *accessible != NULL; i++)
            if ((access >> i) & 1) (*accessible)[k++] = (hsa_agent_t){AGENT_BASE + (uint64_t)i};
    }
    return HSA_STATUS_SUCCESS;
}

/* ---- signals ---- */

static struct sig *sig_of(hsa_signal_t s) {
    for (struct slab *sl = slabs; sl != NULL; sl = sl->next) {
        uintptr_t base = (uintptr_t)sl->sigs;
        if (s.handle >= base && s.handle < base + sizeof sl->sigs &&
            (s.handle - base) % sizeof(struct sig) == 0) {
            struct sig *g = (struct sig *)(uintptr_t)s.handle;
            return g->magic == SIG_MAGIC && g->live ? g : NULL;
        }
    }
    return NULL;
}

hsa_status_t hsa_signal_create(hsa_signal_value_t initial_value, uint32_t num_consumers,
                               const hsa_agent_t *consumers, hsa_signal_t *signal) {
    ENTER("hsa_signal_create");
    if (signal == NULL || (num_consumers > 0 && consumers == NULL)) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&mu);
    if (free_sigs == NULL) {
        struct slab *sl = calloc(1, sizeof *sl);
        if (sl == NULL) {
            pthread_mutex_unlock(&mu);
            return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
        }
        sl->next = slabs;
        slabs = sl;
        for (int i = SLAB - 1; i >= 0; i--) {
            sl->sigs[i].magic = SIG_MAGIC;
            sl->sigs[i].next_free = free_sigs;
            free_sigs = &sl->sigs[i];
        }
    }
    struct sig *g = free_sigs;
    free_sigs = g->next_free;
    g->live = 1;
    g->copied = false;
    g->start_ts = g->end_ts = 0;
    __atomic_store_n(&g->value, initial_value, __ATOMIC_RELEASE);
    live_sigs++;
    pthread_mutex_unlock(&mu);
    signal->handle = (uint64_t)(uintptr_t)g;
    return HSA_STATUS_SUCCESS;
}

static bool job_uses(struct job *j, struct sig *g) {
    if (j->done == g) return true;
    for (int i = 0; i < j->ndeps; i++)
        if (j->deps[i] == g) return true;
    return false;
}

hsa_status_t hsa_signal_destroy(hsa_signal_t signal) {
    ENTER("hsa_signal_destroy");
    pthread_mutex_lock(&mu);
    struct sig *g = sig_of(signal);
    if (g == NULL) {
        pthread_mutex_unlock(&mu);
        return HSA_STATUS_ERROR_INVALID_SIGNAL;
    }
    bool busy = false;
    for (struct job *j = jobs_head; j != NULL && !busy; j = j->next) busy = job_uses(j, g);
    if (busy) {
        pthread_mutex_unlock(&mu);
        return HSA_STATUS_ERROR_RESOURCE_FREE;
    }
    if (g->waiters > 0) waited_destroys++;
    g->live = 0;
    g->next_free = free_sigs;
    free_sigs = g;
    live_sigs--;
    pthread_mutex_unlock(&mu);
    return HSA_STATUS_SUCCESS;
}

/* Loads of a handle that is not a live signal read 0: the real runtime would
 * read freed memory. */
hsa_signal_value_t hsa_signal_load_scacquire(hsa_signal_t signal) {
    pthread_mutex_lock(&mu);
    struct sig *g = sig_of(signal);
    pthread_mutex_unlock(&mu);
    return g ? __atomic_load_n(&g->value, __ATOMIC_ACQUIRE) : 0;
}

hsa_signal_value_t hsa_signal_load_relaxed(hsa_signal_t signal) {
    pthread_mutex_lock(&mu);
    struct sig *g = sig_of(signal);
    pthread_mutex_unlock(&mu);
    return g ? __atomic_load_n(&g->value, __ATOMIC_RELAXED) : 0;
}

static bool satisfied(int64_t v, int cond, int64_t cmp) {
    switch (cond) {
    case COND_EQ: return v == cmp;
    case COND_NE: return v != cmp;
    case COND_LT: return v < cmp;
    case COND_GTE: return v >= cmp;
    }
    return true;
}

/* The timeout hint is in HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY ticks, which
 * here are nanoseconds. Like the real one it may return before the condition
 * holds; callers loop. */
hsa_signal_value_t hsa_signal_wait_scacquire(hsa_signal_t signal, int condition, hsa_signal_value_t compare_value,
                                             uint64_t timeout_hint, int wait_state_hint) {
    (void)wait_state_hint;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    if (timeout_hint > 3600ull * 1000000000ull) timeout_hint = 3600ull * 1000000000ull;
    until.tv_sec += (time_t)(timeout_hint / 1000000000ull);
    until.tv_nsec += (long)(timeout_hint % 1000000000ull);
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&mu);
    struct sig *g = sig_of(signal), *w = g;
    int64_t v = 0;
    if (w != NULL) {
        w->waiters++;
        waiting++;
    }
    while (g != NULL) {
        v = __atomic_load_n(&g->value, __ATOMIC_ACQUIRE);
        if (satisfied(v, condition, compare_value)) break;
        if (pthread_cond_timedwait(&sig_cv, &mu, &until) != 0) {
            v = __atomic_load_n(&g->value, __ATOMIC_ACQUIRE);
            break;
        }
        g = sig_of(signal);
    }
    if (w != NULL) {
        w->waiters--;
        waiting--;
    }
    pthread_mutex_unlock(&mu);
    return v;
}

/* ---- copies ---- */

/* translate maps [p, p+n) of memory an agent may use to the host memory
 * behind it. gpus is the bit mask of the GPU agents of the copy: each must
 * have access (its own pool, or granted by a lock or
 * hsa_amd_agents_allow_access), as both agents of a copy between two GPUs
 * reach both buffers. */
static hsa_status_t translate_locked(uintptr_t p, size_t n, uint64_t gpus, void **real) {
    for (int i = 0; i < nlocks; i++) {
        struct lock *l = &locks[i];
        if (p >= l->agent && p - l->agent < l->size) {
            if (n > l->size - (p - l->agent)) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
            if ((l->access & gpus) != gpus) return HSA_STATUS_ERROR_INVALID_AGENT;
            *real = (void *)(l->host + (p - l->agent));
            return HSA_STATUS_SUCCESS;
        }
    }
    struct alloc *a = find_alloc_locked(p, n);
    if (a == NULL && apu && !(p & (DEV_BIAS | LOCK_BIAS)) && p != 0) {
        *real = (void *)p; /* a full-profile GPU reaches all host memory */
        return HSA_STATUS_SUCCESS;
    }
    if (a == NULL) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    if ((a->access & gpus) != gpus) return HSA_STATUS_ERROR_INVALID_AGENT;
    *real = (char *)a->real + (p - a->addr);
    return HSA_STATUS_SUCCESS;
}

/* The copy engines. ROCr promises no order between two
 * hsa_amd_memory_async_copy calls but the one their signals give: the
 * reference (hsa_ext_amd.h) says of dep_signals "List of signals that must
 * be waited on before the copy operation starts. The copy will start after
 * every signal has been observed with the value 0", and of
 * completion_signal "When the copy operation is finished, the value of the
 * signal is decremented" -- nothing about copies submitted earlier. ROCr
 * runs them on several DMA engines (host to device and device to host on
 * different SDMA engines, device to device as blit kernels), each
 * completing on its own time. So FAKEHSA_ENGINES workers (default 2) each
 * take the NEWEST copy that is due (FAKEHSA_COPY_DELAY_US after its
 * submission) and whose dependent signals are all 0, and perform copies
 * concurrently; a copy whose dependencies are not met holds up nothing
 * else. Copies submitted while the "copy" gate was closed are therefore
 * performed newest first once it opens, unless their signals order them:
 * a program that counts on submission order sees it broken, one that
 * chains its copies through dep_signals does not. (ROCr's queues' barrier-AND
 * packets are not modelled: nothing here creates an HSA queue.) */
static void init_engines(void) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&job_cv, &ca);
    pthread_condattr_destroy(&ca);
}
static pthread_once_t engines_once = PTHREAD_ONCE_INIT;

static bool ts_le(const struct timespec *a, const struct timespec *b) {
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec <= b->tv_nsec);
}

static bool deps_met(const struct job *j) {
    for (int i = 0; i < j->ndeps; i++)
        if (__atomic_load_n(&j->deps[i]->value, __ATOMIC_ACQUIRE) != 0) return false;
    return true;
}

/* pick_locked returns the newest copy an engine may start now, or NULL and,
 * in *next, the earliest time a copy not yet due becomes due (*has_next). */
static struct job *pick_locked(struct timespec *next, bool *has_next) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    struct job *best = NULL;
    *has_next = false;
    for (struct job *j = jobs_head; j != NULL; j = j->next) {
        if (j->running) continue;
        if (!ts_le(&j->due, &now)) {
            if (!*has_next || ts_le(&j->due, next)) *next = j->due;
            *has_next = true;
            continue;
        }
        if (deps_met(j)) best = j; /* the list is in submission order: keep the last */
    }
    return best;
}

static bool copy_gate_closed(void) {
    pthread_mutex_lock(&gate_mu);
    bool c = gate_closed[GATE_COPY];
    pthread_mutex_unlock(&gate_mu);
    return c;
}

static void *worker(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&mu);
        struct job *j;
        for (;;) {
            struct timespec next;
            bool has_next;
            j = pick_locked(&next, &has_next);
            if (j != NULL && copy_gate_closed()) {
                /* A device kept busy: the copies stay pending. Checked with
                 * mu held, so a copy submitted after the gate closed is
                 * never taken before it opens; looked for again after. */
                pthread_mutex_unlock(&mu);
                gate_wait(GATE_COPY);
                pthread_mutex_lock(&mu);
                continue;
            }
            if (j != NULL) break;
            if (has_next) pthread_cond_timedwait(&job_cv, &mu, &next);
            else pthread_cond_wait(&job_cv, &mu);
        }
        j->running = true;
        pthread_mutex_unlock(&mu);

        uint64_t t0 = now_ns();
        if (j->size > 0) memmove(j->dst, j->src, j->size);

        pthread_mutex_lock(&mu);
        if (j->profiled) { /* written before the signal says done */
            j->done->start_ts = t0;
            j->done->end_ts = now_ns();
        }
        __atomic_fetch_sub(&j->done->value, 1, __ATOMIC_ACQ_REL);
        struct job **pp = &jobs_head, *prev = NULL;
        while (*pp != j) {
            prev = *pp;
            pp = &(*pp)->next;
        }
        *pp = j->next;
        if (jobs_tail == j) jobs_tail = prev;
        jobs_pending--;
        copies_done++;
        pthread_cond_broadcast(&sig_cv);
        pthread_cond_broadcast(&job_cv); /* a dependency may be met now */
        pthread_mutex_unlock(&mu);
        free(j->deps);
        free(j);
    }
    return NULL;
}

hsa_status_t hsa_amd_memory_async_copy(void *dst, hsa_agent_t dst_agent, const void *src, hsa_agent_t src_agent,
                                       size_t size, uint32_t num_dep_signals, const hsa_signal_t *dep_signals,
                                       hsa_signal_t completion_signal) {
    ENTER("hsa_amd_memory_async_copy");
    int da = agent_index(dst_agent), sa = agent_index(src_agent);
    if (da < 0 || sa < 0) return HSA_STATUS_ERROR_INVALID_AGENT;
    if (dst == NULL || src == NULL || (num_dep_signals > 0 && dep_signals == NULL))
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    uint64_t gpus = (agents[da].type == HSA_DEVICE_TYPE_GPU ? 1ull << da : 0) |
                    (agents[sa].type == HSA_DEVICE_TYPE_GPU ? 1ull << sa : 0);
    struct job *j = calloc(1, sizeof *j);
    if (j == NULL) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    j->deps = num_dep_signals ? calloc(num_dep_signals, sizeof *j->deps) : NULL;
    if (num_dep_signals && j->deps == NULL) {
        free(j);
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    pthread_mutex_lock(&mu);
    hsa_status_t st = translate_locked((uintptr_t)dst, size, gpus, &j->dst);
    if (st == HSA_STATUS_SUCCESS) st = translate_locked((uintptr_t)src, size, gpus, &j->src);
    if (st == HSA_STATUS_SUCCESS && (j->done = sig_of(completion_signal)) == NULL) st = HSA_STATUS_ERROR_INVALID_SIGNAL;
    for (uint32_t i = 0; i < num_dep_signals && st == HSA_STATUS_SUCCESS; i++) {
        j->deps[i] = sig_of(dep_signals[i]);
        if (j->deps[i] == NULL) st = HSA_STATUS_ERROR_INVALID_SIGNAL;
    }
    if (st != HSA_STATUS_SUCCESS) {
        pthread_mutex_unlock(&mu);
        free(j->deps);
        free(j);
        return st;
    }
    j->ndeps = (int)num_dep_signals;
    j->size = size;
    j->profiled = copy_profiling;
    j->done->copied = true;
    clock_gettime(CLOCK_MONOTONIC, &j->due);
    j->due.tv_sec += delay_us / 1000000;
    j->due.tv_nsec += (delay_us % 1000000) * 1000;
    if (j->due.tv_nsec >= 1000000000L) {
        j->due.tv_sec++;
        j->due.tv_nsec -= 1000000000L;
    }
    if (!workers_started) {
        pthread_once(&engines_once, init_engines);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int started = 0;
        for (int i = 0; i < nengines; i++) {
            pthread_t t;
            if (pthread_create(&t, &attr, worker, NULL) == 0) started++;
        }
        pthread_attr_destroy(&attr);
        if (started == 0) {
            pthread_mutex_unlock(&mu);
            free(j->deps);
            free(j);
            return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
        }
        workers_started = true;
    }
    if (jobs_tail) jobs_tail->next = j;
    else jobs_head = j;
    jobs_tail = j;
    jobs_pending++;
    pthread_cond_broadcast(&job_cv);
    pthread_mutex_unlock(&mu);
    return HSA_STATUS_SUCCESS;
}

/* ---- async copy profiling ----
 *
 * hsa_ext_amd.h, hsa_amd_profiling_async_copy_enable: "The runtime will
 * provide the copy processing start timestamp and completion timestamp of
 * each call to hsa_amd_memory_async_copy if the async copy profiling is
 * enabled prior to the call to hsa_amd_memory_async_copy. The completion
 * signal object is used to hold the last async copy start and end
 * timestamp." ROCr (hsa_ext_amd.cpp) sets a flag on every GPU agent; it is
 * one switch for the process, not counted: a disable by anyone ends it for
 * all. So here: one flag, sampled by each copy when it is submitted; a
 * profiled copy writes its start and end into its completion signal before
 * the signal is decremented; a copy not profiled leaves the signal's
 * timestamps as they were (0 for a new signal).
 *
 * hsa_amd_profiling_get_async_copy_time: "Async copy processing timestamps
 * in the HSA system clock domain" (HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY
 * ticks: nanoseconds of CLOCK_MONOTONIC here); HSA_STATUS_ERROR_INVALID_SIGNAL
 * for an invalid signal, HSA_STATUS_ERROR_INVALID_ARGUMENT for a NULL time;
 * and, as ROCr does when the signal never was a copy's completion signal
 * (its async_copy_agent() is null), HSA_STATUS_ERROR. Nothing promises the
 * timestamps before the copy completed: the fake then reports what the
 * signal holds. */
hsa_status_t hsa_amd_profiling_async_copy_enable(bool enable) {
    ENTER("hsa_amd_profiling_async_copy_enable");
    pthread_mutex_lock(&mu);
    copy_profiling = enable;
    pthread_mutex_unlock(&mu);
    return HSA_STATUS_SUCCESS;
}

typedef struct {
    uint64_t start, end;
} hsa_amd_profiling_async_copy_time_t;

hsa_status_t hsa_amd_profiling_get_async_copy_time(hsa_signal_t signal, hsa_amd_profiling_async_copy_time_t *time) {
    ENTER("hsa_amd_profiling_get_async_copy_time");
    if (time == NULL) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&mu);
    struct sig *g = sig_of(signal);
    hsa_status_t st = HSA_STATUS_SUCCESS;
    if (g == NULL) st = HSA_STATUS_ERROR_INVALID_SIGNAL;
    else if (!g->copied) st = HSA_STATUS_ERROR;
    else {
        time->start = g->start_ts;
        time->end = g->end_ts;
    }
    pthread_mutex_unlock(&mu);
    return st;
}

/* Synchronous; unlike async copies it also takes plain host memory, as the
 * real one does. */
hsa_status_t hsa_memory_copy(void *dst, const void *src, size_t size) {
    ENTER("hsa_memory_copy");
    if (dst == NULL || src == NULL) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    void *rd = dst, *rs = (void *)src;
    pthread_mutex_lock(&mu);
    if (translate_locked((uintptr_t)dst, size, 0, &rd) != HSA_STATUS_SUCCESS) rd = dst;
    if (translate_locked((uintptr_t)src, size, 0, &rs) != HSA_STATUS_SUCCESS) rs = (void *)src;
    pthread_mutex_unlock(&mu);
    if (((uintptr_t)rd | (uintptr_t)rs) & (DEV_BIAS | LOCK_BIAS)) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    memmove(rd, rs, size);
    return HSA_STATUS_SUCCESS;
}

/* ---- test hook ---- */

int64_t fakehsa_count(const char *what) {
    int64_t n = -1;
    pthread_mutex_lock(&mu);
    if (strcmp(what, "signals") == 0) n = live_sigs;
    else if (strcmp(what, "allocs") == 0) n = nallocs;
    else if (strcmp(what, "gpu_allocs") == 0) {
        n = 0;
        for (int i = 0; i < nallocs; i++) n += agents[pools[allocs[i].pool].agent].type == HSA_DEVICE_TYPE_GPU;
    }
    else if (strncmp(what, "vram_used:", 10) == 0) {
        int gpu = atoi(what + 10), seen = 0;
        for (int a = 0; a < nagents; a++) {
            if (agents[a].type != HSA_DEVICE_TYPE_GPU || seen++ != gpu) continue;
            for (int k = 0; k < npools; k++)
                if (pools[k].agent == a && pools[k].segment == HSA_AMD_SEGMENT_GLOBAL && (pools[k].flags & FLAG_COARSE_GRAINED))
                    n = (int64_t)pools[k].used;
        }
    }
    else if (strcmp(what, "alloc_calls") == 0) n = alloc_calls;
    else if (strcmp(what, "locks") == 0) n = nlocks;
    else if (strcmp(what, "pending") == 0) n = jobs_pending;
    else if (strcmp(what, "copies") == 0) n = copies_done;
    else if (strcmp(what, "due") == 0) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        n = 0;
        for (struct job *j = jobs_head; j != NULL; j = j->next) n += !j->running && ts_le(&j->due, &now);
    }
    else if (strcmp(what, "lock_calls") == 0) n = lock_calls;
    else if (strcmp(what, "unlock_calls") == 0) n = unlock_calls;
    else if (strcmp(what, "stray_unlocks") == 0) n = stray_unlocks;
    else if (strcmp(what, "inits") == 0) n = refs;
    else if (strcmp(what, "waiting") == 0) n = waiting;
    else if (strcmp(what, "waited_destroys") == 0) n = waited_destroys;
    pthread_mutex_unlock(&mu);
    if (strcmp(what, "gated") == 0) {
        pthread_mutex_lock(&gate_mu);
        n = gated;
        pthread_mutex_unlock(&gate_mu);
    }
    return n;
}
