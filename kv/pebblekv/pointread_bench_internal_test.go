package pebblekv

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// BenchmarkPointRead compares pebble's Snapshot.Get with seeks of one
// kept iterator (txn.pointGet), on 20,000 keys spread over sstables and the
// memtable: random and in-order hits, misses, and a fresh iterator per
// read.
func BenchmarkPointRead(b *testing.B) {
	ks, err := Open(Options{Dir: b.TempDir(), NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer ks.Close()
	s := ks.(*store)
	const n = 20000
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "d/%08x/name-%06d", i/50, i)
	}
	for i := 0; i < n; i += 500 {
		bt := s.db.NewBatch()
		for _, k := range keys[i : i+500] {
			_ = bt.Set(k, make([]byte, 40), nil)
		}
		_ = bt.Commit(pebble.NoSync)
		if i%5000 == 0 {
			_ = s.db.Flush()
		}
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	r := rand.New(rand.NewPCG(1, 2))
	b.Run("get", func(b *testing.B) {
		for b.Loop() {
			k := keys[r.IntN(n)]
			v, c, err := snap.Get(k)
			if err != nil {
				b.Fatal(err)
			}
			_ = v
			c.Close()
		}
	})
	b.Run("iter-seekge", func(b *testing.B) {
		it, _ := snap.NewIter(nil)
		defer it.Close()
		for b.Loop() {
			k := keys[r.IntN(n)]
			if !it.SeekGE(k) || !bytes.Equal(it.Key(), k) {
				b.Fatal("miss")
			}
			_, _ = it.ValueAndErr()
		}
	})
	b.Run("iter-seekprefix", func(b *testing.B) {
		it, _ := snap.NewIter(nil)
		defer it.Close()
		for b.Loop() {
			k := keys[r.IntN(n)]
			if !it.SeekPrefixGE(k) || !bytes.Equal(it.Key(), k) {
				b.Fatal("miss")
			}
			_, _ = it.ValueAndErr()
		}
	})
	b.Run("iter-seekprefix-seq", func(b *testing.B) {
		it, _ := snap.NewIter(nil)
		defer it.Close()
		i := 0
		for b.Loop() {
			k := keys[i%n]
			i++
			if !it.SeekPrefixGE(k) || !bytes.Equal(it.Key(), k) {
				b.Fatal("miss")
			}
			_, _ = it.ValueAndErr()
		}
	})
	b.Run("iter-seekge-seq", func(b *testing.B) {
		it, _ := snap.NewIter(nil)
		defer it.Close()
		i := 0
		for b.Loop() {
			k := keys[i%n]
			i++
			if !it.SeekGE(k) || !bytes.Equal(it.Key(), k) {
				b.Fatal("miss")
			}
			_, _ = it.ValueAndErr()
		}
	})
	b.Run("miss-get", func(b *testing.B) {
		for b.Loop() {
			k := append(keys[r.IntN(n)], 'x')
			_, _, err := snap.Get(k)
			if err == nil {
				b.Fatal("hit")
			}
		}
	})
	b.Run("miss-seekprefix", func(b *testing.B) {
		it, _ := snap.NewIter(nil)
		defer it.Close()
		for b.Loop() {
			k := append(keys[r.IntN(n)], 'x')
			if it.SeekPrefixGE(k) && bytes.Equal(it.Key(), k) {
				b.Fatal("hit")
			}
		}
	})
	b.Run("fresh-iter", func(b *testing.B) {
		for b.Loop() {
			k := keys[r.IntN(n)]
			it, _ := snap.NewIter(nil)
			if !it.SeekPrefixGE(k) || !bytes.Equal(it.Key(), k) {
				b.Fatal("miss")
			}
			it.Close()
		}
	})
	b.Run("get-seq", func(b *testing.B) {
		i := 0
		for b.Loop() {
			k := keys[i%n]
			i++
			v, c, err := snap.Get(k)
			if err != nil {
				b.Fatal(err)
			}
			_ = v
			c.Close()
		}
	})
}
