package host

// pageCounts counts the locks that cover each page. Counts live in chunks of
// chunkPages pages allocated on demand, so a lock of n pages costs a few map
// look-ups and a tight loop, and a gigabyte locked costs 1 MiB of counts.
type pageCounts struct {
	chunks map[uintptr]*countChunk // key: page index / chunkPages
}

const chunkPages = 512

type countChunk struct {
	n    [chunkPages]uint32
	used int // pages of the chunk with a non-zero count
}

// pageRun is a run [first, end) of page indices.
type pageRun struct{ first, end uintptr }

// add adds delta (+1 or -1) to the count of every page in [first, end) and
// returns the runs of pages whose count crossed zero: 0→1 for +1 (the pages
// to mlock), 1→0 for -1 (the pages to munlock). A -1 on a page with count 0
// leaves it at 0 and is not reported.
func (pc *pageCounts) add(first, end uintptr, delta int, runs []pageRun) []pageRun {
	if pc.chunks == nil {
		pc.chunks = make(map[uintptr]*countChunk)
	}
	for pg := first; pg < end; {
		key, off := pg/chunkPages, pg%chunkPages
		stop := min(end-pg, chunkPages-off) + off // exclusive index within the chunk
		c := pc.chunks[key]
		if c == nil {
			if delta < 0 {
				pg += stop - off
				continue
			}
			c = &countChunk{}
			pc.chunks[key] = c
		}
		for i := off; i < stop; i++ {
			crossed := false
			switch {
			case delta > 0:
				c.n[i]++
				if c.n[i] == 1 {
					c.used++
					crossed = true
				}
			case c.n[i] > 0:
				c.n[i]--
				if c.n[i] == 0 {
					c.used--
					crossed = true
				}
			}
			if crossed {
				p := key*chunkPages + i
				if k := len(runs) - 1; k >= 0 && runs[k].end == p {
					runs[k].end++
				} else {
					runs = append(runs, pageRun{p, p + 1})
				}
			}
		}
		if c.used == 0 {
			delete(pc.chunks, key)
		}
		pg += stop - off
	}
	return runs
}
