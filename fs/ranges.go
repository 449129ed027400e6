package fs

import "github.com/txnfs/txnfs/internal/byterange"

// rng is the byte range [Start, End) and ranges a set of them (the
// collector's candidate and freed lists; the encoding in its state record
// is byterange's: an array of two per range).
type (
	rng    = byterange.Range
	ranges = byterange.Set
)
