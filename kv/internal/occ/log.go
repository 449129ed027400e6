package occ

// Log is the recent-commit history used for backward validation: for every
// committed read-write transaction, its commit sequence number and the keys
// it wrote. A transaction that began at snapshot sequence start may commit
// only if no record with seq > start wrote a key it read.
//
// Records are kept while an active read-write transaction may still need
// them (seq > the smallest active start) and dropped after that. If a
// transaction stays open so long that the log exceeds its byte budget, the
// oldest records are dropped anyway and that transaction will fail
// validation with a conflict (conservative, never wrong).
//
// Log is not safe for concurrent use; its owner guards it with its commit
// mutex.
type Log struct {
	recs     []record
	bytes    int
	maxBytes int
	dropped  uint64         // every record with seq <= dropped is gone
	active   map[uint64]int // start seq -> number of active read-write txns
}

type record struct {
	seq    uint64
	writes [][]byte
	bytes  int
}

// NewLog returns an empty log that keeps at most maxBytes of write keys
// (approximately) once no active transaction needs older records.
func NewLog(maxBytes int) *Log {
	return &Log{maxBytes: maxBytes, active: map[uint64]int{}}
}

// Register notes that a read-write transaction began at snapshot start.
// Exactly one Unregister with the same start must follow.
func (l *Log) Register(start uint64) { l.active[start]++ }

// Unregister undoes Register and drops records nobody needs any more.
func (l *Log) Unregister(start uint64) {
	if l.active[start]--; l.active[start] <= 0 {
		delete(l.active, start)
	}
	l.trim()
}

// Conflicts reports whether a transaction that began at start and read rs
// must abort: a record with seq > start wrote a key in rs, or such records
// were dropped.
func (l *Log) Conflicts(start uint64, rs *ReadSet) bool {
	if start < l.dropped {
		return true
	}
	if rs.Empty() {
		return false
	}
	// Records are in ascending seq order; check the newer ones.
	for i := len(l.recs) - 1; i >= 0 && l.recs[i].seq > start; i-- {
		if rs.Intersects(l.recs[i].writes) {
			return true
		}
	}
	return false
}

// Append records that the transaction with sequence seq (greater than every
// earlier one) wrote keys (ascending). The log keeps the slice.
func (l *Log) Append(seq uint64, keys [][]byte) {
	n := 0
	for _, k := range keys {
		n += len(k) + 24
	}
	l.recs = append(l.recs, record{seq: seq, writes: keys, bytes: n})
	l.bytes += n
	l.trim()
}

// Len returns the number of records kept (for tests and metrics).
func (l *Log) Len() int { return len(l.recs) }

func (l *Log) trim() {
	horizon := ^uint64(0) // no active txn: nobody needs any record
	for s := range l.active {
		horizon = min(horizon, s)
	}
	i := 0
	for i < len(l.recs) && (l.recs[i].seq <= horizon || l.bytes > l.maxBytes) {
		l.bytes -= l.recs[i].bytes
		l.dropped = max(l.dropped, l.recs[i].seq)
		i++
	}
	if i > 0 {
		clear(l.recs[:i]) // let the dropped keys be collected
		l.recs = l.recs[i:]
	}
}
