package slice

import "testing"

// TestPutPayloadDirect: PutPayload on O_DIRECT stores, unstaged (an
// aligned payload written from the caller's buffer) and staged (copied
// without hashing), also through the cache (checkPayloadPuts: right CRCs
// read back, stale ones read ErrCorrupt); the store hashes nothing.
func TestPutPayloadDirect(t *testing.T) {
	for _, unstaged := range []bool{true, false} {
		var l *Local
		if unstaged {
			l = openUnstagedOrSkip(t, t.TempDir())
		} else {
			l = openDirectOrSkip(t, t.TempDir())
		}
		mk := func(i int) []byte {
			if i%3 == 2 {
				return directData(uint64(i), MaxSize-100) // unaligned: staged
			}
			return alignedData(uint64(i), MaxSize)
		}
		checkPayloadPuts(t, l, mk)
		checkPayloadPuts(t, NewCache(l, 64<<20), mk)
		st := l.Stats()
		if st.DirectPuts != 8 || (unstaged && st.UnstagedPuts == 0) || (!unstaged && st.UnstagedPuts != 0) {
			t.Fatalf("unstaged store %v: %d direct puts (want 8), %d unstaged", unstaged, st.DirectPuts, st.UnstagedPuts)
		}
		l.Close()
	}
}
