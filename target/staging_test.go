package target

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ompalloc/ompalloc/internal/cmem"
	"github.com/ompalloc/ompalloc/internal/plugin"
)

// submitRound submits n copies of size bytes on q, all from the same source
// buffer, refilled before each one (as a caller reuses a stack variable):
// only a copy that captured its bytes at submission gets its own data.
func submitRound(t *testing.T, d *Device, q *Queue, src uintptr, dsts []uintptr, size uintptr, round int) {
	t.Helper()
	for i, dst := range dsts {
		fill(src, size, round*1000+i)
		require.NoError(t, d.submit(dst, src, size, q))
	}
}

func waitIdle(t *testing.T, q *Queue) {
	t.Helper()
	require.Eventually(t, func() bool {
		done, err := q.Query()
		require.NoError(t, err)
		return done
	}, 10*time.Second, time.Millisecond)
}

// Ported from LLVM PR 213767's first test: many submissions on one queue
// without synchronizing; the copies run late; a second round reuses the
// buffers of the first, which only a Query returned to the pool.
func TestStagingManySubmissionsOneQueue(t *testing.T) {
	f, d := withFake(t, 0)
	const n, size = 100, 200
	q, err := d.NewQueue()
	require.NoError(t, err)
	src := hostMem(t, size)
	dsts := make([]uintptr, n)
	for i := range dsts {
		dsts[i], err = d.Alloc(MemDevice, size)
		require.NoError(t, err)
	}

	for round := range 2 {
		f.holdWork() // nothing completes while submitting
		submitRound(t, d, q, src, dsts, size, round)
		s := d.StagingStats()
		require.Equal(t, uint64(n), s.Misses, "round %d: the pool holds one buffer per submission", round)
		require.Equal(t, uint64(round*n), s.Hits, "round %d", round)
		require.Equal(t, uintptr(n*256), s.InUseBytes, "round %d: every buffer is in flight", round)
		f.release()

		waitIdle(t, q) // never Synchronize: a Query that finds the queue idle recycles
		s = d.StagingStats()
		require.Equal(t, uint64((round+1)*n), s.Recycled, "round %d", round)
		require.Equal(t, uintptr(0), s.InUseBytes)
		require.Equal(t, uintptr(n*256), s.PoolBytes)
		require.Equal(t, n, s.Buffers)
		for i, dst := range dsts {
			require.True(t, hasFill(dst, size, round*1000+i), "round %d: destination %d has its own data", round, i)
		}
	}
	_, _, pinnedCopies, freedReads := f.counts()
	require.Zero(t, freedReads)
	require.Equal(t, 2*n, pinnedCopies, "every copy read a pinned staging buffer")
	require.Equal(t, n, f.live(MemHost))
	require.NoError(t, q.Close())
}

// The control for the test above: without staging, the same submissions
// read the reused source late, and destinations get later data. This proves
// the fake really runs its copies late.
func TestStagingOffReadsSourceLate(t *testing.T) {
	f, d := withFake(t, 0)
	d.SetStagingConfig(StagingConfig{})
	const n, size = 10, 200
	q, err := d.NewQueue()
	require.NoError(t, err)
	src := hostMem(t, size)
	dsts := make([]uintptr, n)
	for i := range dsts {
		dsts[i], err = d.Alloc(MemDevice, size)
		require.NoError(t, err)
	}
	f.holdWork()
	submitRound(t, d, q, src, dsts, size, 0)
	f.release()
	require.NoError(t, q.Synchronize(context.Background()))
	require.False(t, hasFill(dsts[0], size, 0), "an unstaged late copy reads what the source holds when it runs")
	require.True(t, hasFill(dsts[0], size, n-1))
	require.Equal(t, StagingStats{}, d.StagingStats())
}

// Ported from the PR's second test: submissions, synchronizations and
// queries spread over several goroutines, on shared queues.
func TestStagingConcurrentSubmissions(t *testing.T) {
	f, d := withFake(t, 20*time.Microsecond)
	const goroutines, per = 8, 60
	queues := make([]*Queue, 3)
	for i := range queues {
		var err error
		queues[i], err = d.NewQueue()
		require.NoError(t, err)
	}
	type sub struct {
		dst, size uintptr
		seed      int
	}
	subs := make([][]sub, goroutines)
	for g := range subs {
		for i := range per {
			size := uintptr(1 + (g*per+i)*37%5000)
			dst, err := d.Alloc(MemDevice, size)
			require.NoError(t, err)
			subs[g] = append(subs[g], sub{dst, size, g*per + i})
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		src := hostMem(t, 5000)
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for _, s := range subs[g] {
				q := queues[r.IntN(len(queues))]
				fill(src, s.size, s.seed)
				if err := d.submit(s.dst, src, s.size, q); err != nil {
					errs <- err
					return
				}
				switch r.IntN(8) {
				case 0:
					if err := q.Synchronize(context.Background()); err != nil {
						errs <- err
						return
					}
				case 1, 2:
					if _, err := q.Query(); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, q := range queues {
		require.NoError(t, q.Synchronize(context.Background()))
	}
	for g := range subs {
		for _, s := range subs[g] {
			require.True(t, hasFill(s.dst, s.size, s.seed), "destination of submission %d has its own data", s.seed)
		}
	}
	st := d.StagingStats()
	require.Equal(t, uint64(goroutines*per), st.Hits+st.Misses)
	require.Equal(t, uint64(goroutines*per), st.Recycled)
	require.Equal(t, uintptr(0), st.InUseBytes)
	require.LessOrEqual(t, st.PoolBytes, d.StagingConfig().MaxPoolBytes)
	require.Equal(t, st.Buffers, f.live(MemHost))
	require.Positive(t, st.Hits, "buffers are reused")
	_, _, _, freedReads := f.counts()
	require.Zero(t, freedReads, "no copy read a buffer after it was freed")
	t.Logf("%+v", st)
}

func TestStagingChoosesPath(t *testing.T) {
	f, d := withFake(t, 0)
	q, err := d.NewQueue()
	require.NoError(t, err)
	dst, err := d.Alloc(MemDevice, 1<<20)
	require.NoError(t, err)
	src := hostMem(t, 1<<20)
	pinnedSrc, err := d.Alloc(MemHost, 3000) // a page mapped, 3000 bytes registered
	require.NoError(t, err)
	threshold := d.StagingConfig().Threshold

	tests := []struct {
		name   string
		src, n uintptr
		q      *Queue
		staged bool
		pinned bool // the copy's host side was pinned memory
	}{
		{"small async pageable: staged", src, 100, q, true, true},
		{"at the threshold: staged", src, threshold, q, true, true},
		{"over the threshold: not staged", src, threshold + 1, q, false, false},
		{"synchronous: not staged", src, 100, nil, false, false},
		{"registered host memory: pinned path", pinnedSrc, 100, q, false, true},
		{"registered, interior: pinned path", pinnedSrc + 8, 100, q, false, true},
		{"registered, running past the end: not pinned", pinnedSrc + 2900, 200, nil, false, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := d.StagingStats()
			_, _, pinnedBefore, _ := f.counts()
			fill(tt.src, tt.n, i)
			require.NoError(t, d.submit(dst, tt.src, tt.n, tt.q))
			require.NoError(t, q.Synchronize(context.Background()))
			require.True(t, hasFill(dst, tt.n, i))
			after := d.StagingStats()
			staged := after.Hits+after.Misses > before.Hits+before.Misses
			require.Equal(t, tt.staged, staged)
			_, _, pinnedAfter, _ := f.counts()
			require.Equal(t, tt.pinned, pinnedAfter > pinnedBefore, "the copy's host side was pinned")
		})
	}
	require.NoError(t, d.Free(MemHost, pinnedSrc))
}

func TestStagingAllocFailureSubmitsUnstaged(t *testing.T) {
	f, d := withFake(t, 0)
	f.failHostAlloc.Store(true)
	q, err := d.NewQueue()
	require.NoError(t, err)
	dst, err := d.Alloc(MemDevice, 64)
	require.NoError(t, err)
	src := hostMem(t, 64)
	fill(src, 64, 7)
	require.NoError(t, d.submit(dst, src, 64, q), "staging is optional, never an error")
	require.NoError(t, q.Synchronize(context.Background()))
	require.True(t, hasFill(dst, 64, 7))
	s := d.StagingStats()
	require.Equal(t, uint64(1), s.Unstaged)
	require.Equal(t, uint64(1), s.AllocFailures)
	require.Zero(t, s.Buffers)
}

func TestStagingPoolLimit(t *testing.T) {
	f, d := withFake(t, 0)
	d.SetStagingConfig(StagingConfig{Threshold: 4096, MaxPoolBytes: 3 * 4096})
	q, err := d.NewQueue()
	require.NoError(t, err)
	src := hostMem(t, 4096)
	dst, err := d.Alloc(MemDevice, 4096)
	require.NoError(t, err)
	f.holdWork()
	for range 5 {
		require.NoError(t, d.submit(dst, src, 4096, q))
	}
	f.release()
	require.NoError(t, q.Synchronize(context.Background()))
	s := d.StagingStats()
	require.Equal(t, uintptr(3*4096), s.PoolBytes, "the pool keeps what its limit allows")
	require.Equal(t, uint64(2), s.Freed, "and frees the rest")
	require.Equal(t, 3, f.live(MemHost))

	d.SetStagingConfig(StagingConfig{Threshold: 1024, MaxPoolBytes: 1 << 20})
	s = d.StagingStats()
	require.Zero(t, s.PoolBytes, "buffers above the new threshold are freed")
	require.Zero(t, f.live(MemHost))

	// A threshold between two classes keeps the class that holds it.
	d.SetStagingConfig(StagingConfig{Threshold: 3000, MaxPoolBytes: 1 << 20})
	require.NoError(t, d.submit(dst, src, 3000, q))
	require.NoError(t, q.Synchronize(context.Background()))
	s = d.StagingStats()
	require.Equal(t, uintptr(4096), s.PoolBytes)
	require.NoError(t, d.submit(dst, src, 3000, q))
	require.Equal(t, uint64(1), d.StagingStats().Hits-s.Hits)
	require.NoError(t, q.Synchronize(context.Background()))

	// Staging off: nothing is kept, nothing staged.
	d.SetStagingConfig(StagingConfig{Threshold: 0, MaxPoolBytes: 1 << 20})
	require.Zero(t, d.StagingStats().PoolBytes)
	require.NoError(t, d.submit(dst, src, 64, q))
	require.NoError(t, q.Synchronize(context.Background())) // unstaged: the copy reads src late
	require.Equal(t, s.Misses, d.StagingStats().Misses)
}

func TestShutdownFreesBuffersOfUnfinishedQueues(t *testing.T) {
	f, d := withFake(t, time.Millisecond)
	q, err := d.NewQueue()
	require.NoError(t, err)
	q2, err := d.NewQueue()
	require.NoError(t, err)
	src := hostMem(t, 512)
	dst, err := d.Alloc(MemDevice, 512)
	require.NoError(t, err)
	for i := range 10 {
		require.NoError(t, d.submit(dst, src, uintptr(1+i*50), q))
		require.NoError(t, d.submit(dst, src, 300, q2))
	}
	// Neither queue was synchronized or queried.
	require.Positive(t, f.live(MemHost))
	require.NoError(t, Shutdown())
	require.Zero(t, f.live(MemHost), "every staging buffer is freed")
	_, _, _, freedReads := f.counts()
	require.Zero(t, freedReads, "none while a copy could still read it")
	require.True(t, f.closed)

	require.ErrorIs(t, d.submit(dst, src, 8, q), ErrShutdown)
	require.ErrorIs(t, q.Synchronize(context.Background()), ErrQueueClosed)
	_, err = d.NewQueue()
	require.ErrorIs(t, err, ErrShutdown)
	require.NoError(t, q.Close(), "closing twice is harmless")
}

func TestQueueSubmitRacesQuery(t *testing.T) {
	// A submission racing with queries on the same queue: every buffer
	// recycled must have had its copy complete (the fake poisons freed
	// buffers and counts late reads of them), and every destination is right.
	f, d := withFake(t, 5*time.Microsecond)
	d.SetStagingConfig(StagingConfig{Threshold: 64 << 10, MaxPoolBytes: 0}) // free on return: reuse would hide nothing
	q, err := d.NewQueue()
	require.NoError(t, err)
	const n = 300
	dsts := make([]uintptr, n)
	for i := range dsts {
		dsts[i], err = d.Alloc(MemDevice, 128)
		require.NoError(t, err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				_, _ = q.Query()
			}
		}
	})
	src := hostMem(t, 128)
	for i, dst := range dsts {
		fill(src, 128, i)
		require.NoError(t, d.submit(dst, src, 128, q))
	}
	close(stop)
	wg.Wait()
	require.NoError(t, q.Synchronize(context.Background()))
	_, _, _, freedReads := f.counts()
	require.Zero(t, freedReads)
	for i, dst := range dsts {
		require.True(t, hasFill(dst, 128, i), fmt.Sprint("destination ", i))
	}
}

// instantImpl is a fake whose copies complete at once: benchmarks of the
// generic layer measure the layer, not the fake's bookkeeping.
type instantImpl struct{ *fakeImpl }

type instantQueue struct{}

func (instantQueue) Synchronize() error   { return nil }
func (instantQueue) Query() (bool, error) { return true, nil }
func (instantQueue) Destroy() error       { return nil }

func (instantImpl) NewQueue() (plugin.QueueImpl, error) { return instantQueue{}, nil }
func (instantImpl) Copy(dst, src, n uintptr, _ plugin.Direction, _ plugin.QueueImpl) error {
	cmem.Copy(dst, src, n)
	return nil
}

// BenchmarkSubmit measures the generic layer's cost per small asynchronous
// submission on a device whose copies are instant: staged through the pool
// (a buffer taken, filled, handed to the queue, recycled by the next
// submission's query), through the registry's pinned path, and unstaged.
func BenchmarkSubmit(b *testing.B) {
	for _, mode := range []string{"staged", "pinned", "pageable"} {
		b.Run(mode, func(b *testing.B) {
			cfg := defaultStagingConfig()
			if mode == "pageable" {
				cfg.Threshold = 0
			}
			withPlugins(b, &fakePlugin{name: "fake", impls: []plugin.Impl{instantImpl{newFake("bench", 0)}}})
			d, err := Get(0)
			require.NoError(b, err)
			d.SetStagingConfig(cfg)
			q, err := d.NewQueue()
			require.NoError(b, err)
			dst, err := d.Alloc(MemDevice, 64)
			require.NoError(b, err)
			src := hostMem(b, 64)
			if mode == "pinned" {
				src, err = d.Alloc(MemHost, 64)
				require.NoError(b, err)
			}
			for b.Loop() {
				if err := d.submit(dst, src, 64, q); err != nil {
					b.Fatal(err)
				}
			}
			require.NoError(b, q.Synchronize(context.Background()))
			if mode == "staged" {
				require.LessOrEqual(b, d.StagingStats().Misses, uint64(2), "buffers are reused")
			}
		})
	}
}
