package target

import (
	"encoding/json"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// MemoryEvent is one allocation or free of device memory in a recorded
// timeline (RecordMemoryHistory).
type MemoryEvent struct {
	T      time.Duration `json:"t_ns"`   // since the recording started
	Device int           `json:"device"` // OpenMP device number
	Op     string        `json:"op"`     // "alloc" or "free"
	Path   string        `json:"path"`   // "direct" (Device.Alloc) or "pool"
	Addr   uintptr       `json:"addr"`
	Bytes  uint64        `json:"bytes"`
	// Allocated and Reserved are the device's figures after the event
	// (MemoryStats.Allocated and Reserved).
	Allocated uint64 `json:"allocated"`
	Reserved  uint64 `json:"reserved"`
}

// MemoryTimelineSchema names the JSON of WriteMemoryHistory, which
// `ompalloc timeline` draws.
const MemoryTimelineSchema = "ompalloc-memory-timeline/1"

var (
	recording atomic.Bool
	historyMu sync.Mutex
	history   []MemoryEvent
	histStart time.Time
	histMax   int
)

// RecordMemoryHistory starts recording a timeline of device memory, every
// allocation and free of device memory on every device with the device's
// allocated and reserved bytes after it, keeping the last maxEvents
// events (torch.cuda.memory._record_memory_history with max_entries);
// maxEvents 0 stops recording and keeps what was recorded. Starting again
// clears it. Recording costs a read of the pool's reserved bytes per event
// (a driver call with the driver's pool): a tool for finding where memory
// goes, not for every run.
func RecordMemoryHistory(maxEvents int) {
	historyMu.Lock()
	defer historyMu.Unlock()
	if maxEvents <= 0 {
		recording.Store(false)
		return
	}
	history, histStart, histMax = nil, time.Now(), maxEvents
	recording.Store(true)
}

// MemoryHistory returns the events recorded, oldest first.
func MemoryHistory() []MemoryEvent {
	historyMu.Lock()
	defer historyMu.Unlock()
	return append([]MemoryEvent(nil), history...)
}

// WriteMemoryHistory writes the events recorded as JSON ({"schema":
// MemoryTimelineSchema, "events": [...]}), the file `ompalloc timeline
// --svg OUT FILE` draws as a chart: allocated and reserved bytes against
// time, per device, with every allocation and free.
func WriteMemoryHistory(w io.Writer) error {
	doc := struct {
		Schema string        `json:"schema"`
		Events []MemoryEvent `json:"events"`
	}{MemoryTimelineSchema, MemoryHistory()}
	if doc.Events == nil {
		doc.Events = []MemoryEvent{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(doc)
}

// record appends an event of d.
func (d *Device) record(p, n uintptr, path memPath, alloc bool, allocated uint64) {
	reserved := d.mem.directBytes() + uint64(d.poolStats().Reserved)
	op := "free"
	if alloc {
		op = "alloc"
	}
	historyMu.Lock()
	defer historyMu.Unlock()
	if !recording.Load() {
		return
	}
	history = append(history, MemoryEvent{T: time.Since(histStart), Device: d.ID, Op: op, Path: path.String(),
		Addr: p, Bytes: uint64(n), Allocated: allocated, Reserved: max(reserved, allocated)})
	if len(history) > histMax {
		history = history[len(history)-histMax:]
	}
}
