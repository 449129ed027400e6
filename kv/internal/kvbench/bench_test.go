package kvbench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	bolt "go.etcd.io/bbolt"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/kv/pebblekv"
)

var bg = context.Background()

// engine is the little each candidate must do for the benchmarks. Every
// write is one durable serializable (or, for bbolt, serial) transaction.
type engine interface {
	// write commits one transaction that sets every key to val.
	write(keys [][]byte, val []byte) error
	// get reads key in its own read transaction.
	get(key []byte) error
	// scan reads up to n pairs under prefix in its own read transaction.
	scan(prefix []byte, n int) (int, error)
	close() error
}

type opener struct {
	name string
	open func(tb testing.TB, dir string) engine
}

var engines = []opener{
	{"pebble", openPebble},
	{"badger", openBadger},
	{"bbolt", openBolt},
}

// --- pebble, through pebblekv (so the OCC layer's cost is included) ---

type pebbleEngine struct{ s kv.Store }

func openPebble(tb testing.TB, dir string) engine {
	s, err := pebblekv.Open(pebblekv.Options{Dir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	return pebbleEngine{s}
}

func (e pebbleEngine) write(keys [][]byte, val []byte) error {
	txn, err := e.s.Begin(bg, kv.TxnOptions{})
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := txn.Set(k, val); err != nil {
			txn.Rollback()
			return err
		}
	}
	return txn.Commit(bg)
}

func (e pebbleEngine) get(key []byte) error {
	txn, err := e.s.Begin(bg, kv.TxnOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer txn.Rollback()
	_, err = txn.Get(bg, key)
	return err
}

func (e pebbleEngine) scan(prefix []byte, n int) (int, error) {
	txn, err := e.s.Begin(bg, kv.TxnOptions{ReadOnly: true})
	if err != nil {
		return 0, err
	}
	defer txn.Rollback()
	pairs, err := txn.Scan(bg, prefix, kv.PrefixEnd(prefix), n)
	return len(pairs), err
}

func (e pebbleEngine) close() error { return e.s.Close() }

// --- badger v4, native SSI transactions, SyncWrites ---

type badgerEngine struct{ db *badger.DB }

func openBadger(tb testing.TB, dir string) engine {
	db, err := badger.Open(badger.DefaultOptions(dir).WithSyncWrites(true).WithLogger(nil))
	if err != nil {
		tb.Fatal(err)
	}
	return badgerEngine{db}
}

func (e badgerEngine) write(keys [][]byte, val []byte) error {
	return e.db.Update(func(txn *badger.Txn) error {
		for _, k := range keys {
			if err := txn.Set(k, val); err != nil {
				return err
			}
		}
		return nil
	})
}

func (e badgerEngine) get(key []byte) error {
	return e.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(key)
		if err != nil {
			return err
		}
		_, err = item.ValueCopy(nil)
		return err
	})
}

func (e badgerEngine) scan(prefix []byte, n int) (int, error) {
	count := 0
	err := e.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Prefix = prefix
		opts.PrefetchSize = n
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Seek(prefix); it.Valid() && count < n; it.Next() {
			item := it.Item()
			_ = item.KeyCopy(nil)
			if _, err := item.ValueCopy(nil); err != nil {
				return err
			}
			count++
		}
		return nil
	})
	return count, err
}

func (e badgerEngine) close() error { return e.db.Close() }

// --- bbolt: one writer at a time, fsync per Update ---

type boltEngine struct{ db *bolt.DB }

var bucket = []byte("b")

func openBolt(tb testing.TB, dir string) engine {
	db, err := bolt.Open(filepath.Join(dir, "bolt.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucket)
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	return boltEngine{db}
}

func (e boltEngine) write(keys [][]byte, val []byte) error {
	return e.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		for _, k := range keys {
			if err := b.Put(k, val); err != nil {
				return err
			}
		}
		return nil
	})
}

func (e boltEngine) get(key []byte) error {
	return e.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucket).Get(key)
		if v == nil {
			return errors.New("not found")
		}
		_ = append([]byte(nil), v...)
		return nil
	})
}

func (e boltEngine) scan(prefix []byte, n int) (int, error) {
	count := 0
	err := e.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucket).Cursor()
		end := kv.PrefixEnd(prefix)
		for k, v := c.Seek(prefix); k != nil && count < n && (end == nil || string(k) < string(end)); k, v = c.Next() {
			_ = append([]byte(nil), k...)
			_ = append([]byte(nil), v...)
			count++
		}
		return nil
	})
	return count, err
}

func (e boltEngine) close() error { return e.db.Close() }

// --- benchmarks ---

const valueSize = 100

func run(b *testing.B, fn func(b *testing.B, e engine)) {
	for _, o := range engines {
		b.Run("engine="+o.name, func(b *testing.B) {
			e := o.open(b, b.TempDir())
			defer func() {
				if err := e.close(); err != nil {
					b.Error(err)
				}
			}()
			fn(b, e)
		})
	}
}

// BenchmarkCommit: single-key durable commits, 1 or 16 goroutines
// committing concurrently (16 shows group commit).
func BenchmarkCommit(b *testing.B) {
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("committers=%d", n), func(b *testing.B) {
			run(b, func(b *testing.B, e engine) {
				var next atomic.Int64
				val := make([]byte, valueSize)
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for range n {
					wg.Go(func() {
						for {
							i := next.Add(1)
							if i > int64(b.N) {
								return
							}
							if err := e.write([][]byte{fmt.Appendf(nil, "c/%010d", i)}, val); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "commits/s")
			})
		})
	}
}

// BenchmarkTxn256: one durable transaction of 256 small sets.
func BenchmarkTxn256(b *testing.B) {
	run(b, func(b *testing.B, e engine) {
		val := make([]byte, valueSize)
		keys := make([][]byte, 256)
		b.SetBytes(256 * valueSize)
		start := time.Now()
		i := 0
		for b.Loop() {
			for j := range keys {
				keys[j] = fmt.Appendf(keys[j][:0], "t/%08d/%03d", i, j)
			}
			i++
			if err := e.write(keys, val); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "txns/s")
	})
}

const (
	prefixes  = 100
	perPrefix = 100
)

func preload(b *testing.B, e engine) {
	b.Helper()
	val := make([]byte, valueSize)
	for p := range prefixes {
		keys := make([][]byte, perPrefix)
		for i := range keys {
			keys[i] = fmt.Appendf(nil, "p/%04d/%04d", p, i)
		}
		if err := e.write(keys, val); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGet: point reads of 10,000 preloaded 100-byte values, each in
// its own read transaction.
func BenchmarkGet(b *testing.B) {
	run(b, func(b *testing.B, e engine) {
		preload(b, e)
		rng := rand.New(rand.NewPCG(1, 1))
		key := make([]byte, 0, 16)
		b.ResetTimer()
		for b.Loop() {
			key = fmt.Appendf(key[:0], "p/%04d/%04d", rng.IntN(prefixes), rng.IntN(perPrefix))
			if err := e.get(key); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkScan100: a 100-pair prefix scan, in its own read transaction.
func BenchmarkScan100(b *testing.B) {
	run(b, func(b *testing.B, e engine) {
		preload(b, e)
		rng := rand.New(rand.NewPCG(1, 1))
		prefix := make([]byte, 0, 16)
		b.ResetTimer()
		for b.Loop() {
			prefix = fmt.Appendf(prefix[:0], "p/%04d/", rng.IntN(prefixes))
			n, err := e.scan(prefix, perPrefix)
			if err != nil || n != perPrefix {
				b.Fatalf("scan %s: %d pairs, %v", prefix, n, err)
			}
		}
	})
}
