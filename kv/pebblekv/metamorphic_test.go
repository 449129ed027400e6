package pebblekv_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"pgregory.net/rapid"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/kv/memkv"
	"github.com/txnfs/txnfs/kv/pebblekv"
)

// TestMetamorphic interleaves up to three open transactions, single
// threaded, over pebblekv and the memkv reference, and checks that every
// operation gives the same result on both, conflicts included.
func TestMetamorphic(t *testing.T) {
	stores := []kv.Store{memkv.New(), open(t, pebblekv.Options{Dir: "db", FS: vfs.NewMem()})}
	keys := []string{"a", "b", "c", "d", "dir/x", "dir/y", "\xff"}
	rapid.Check(t, func(rt *rapid.T) {
		for _, s := range stores {
			txn, err := s.Begin(bg, kv.TxnOptions{})
			if err != nil {
				rt.Fatal(err)
			}
			pairs, _ := txn.Scan(bg, nil, nil, 0)
			for _, p := range pairs {
				_ = txn.Delete(p.Key)
			}
			if err := txn.Commit(bg); err != nil {
				rt.Fatal(err)
			}
		}
		const slots = 3
		var txns [slots][]kv.Txn // per slot, one txn per store
		defer func() {
			for _, ts := range txns {
				for _, txn := range ts {
					txn.Rollback()
				}
			}
		}()
		key := rapid.SampledFrom(keys)
		slot := rapid.IntRange(0, slots-1)
		// do runs op on every store's txn in the slot and compares results.
		do := func(rt *rapid.T, i int, name string, op func(kv.Txn) string) {
			var first string
			for j, txn := range txns[i] {
				got := op(txn)
				if j == 0 {
					first = got
				} else if got != first {
					rt.Fatalf("%s in slot %d: memkv %q, pebblekv %q", name, i, first, got)
				}
			}
		}
		ops := rapid.SampledFrom([]string{"get", "get", "set", "set", "delete", "scan", "scan", "commit", "commit", "rollback"})
		for range rapid.IntRange(10, 200).Draw(rt, "steps") {
			i := slot.Draw(rt, "slot")
			if txns[i] == nil {
				ro := rapid.Float64().Draw(rt, "p") < 0.2
				for _, s := range stores {
					txn, err := s.Begin(bg, kv.TxnOptions{ReadOnly: ro})
					if err != nil {
						rt.Fatal(err)
					}
					txns[i] = append(txns[i], txn)
				}
				continue
			}
			switch op := ops.Draw(rt, "op"); op {
			case "get":
				k := key.Draw(rt, "key")
				do(rt, i, "Get "+k, func(txn kv.Txn) string {
					v, err := txn.Get(bg, []byte(k))
					return fmt.Sprintf("%q %s", v, class(err))
				})
			case "set":
				k := key.Draw(rt, "key")
				v := rapid.StringN(0, 3, 3).Draw(rt, "value")
				do(rt, i, "Set "+k, func(txn kv.Txn) string { return class(txn.Set([]byte(k), []byte(v))) })
			case "delete":
				k := key.Draw(rt, "key")
				do(rt, i, "Delete "+k, func(txn kv.Txn) string { return class(txn.Delete([]byte(k))) })
			case "scan":
				start, end := []byte(key.Draw(rt, "start")), []byte(key.Draw(rt, "end"))
				if rapid.Bool().Draw(rt, "unbounded") {
					end = nil
				}
				limit := rapid.IntRange(0, 3).Draw(rt, "limit")
				do(rt, i, "Scan", func(txn kv.Txn) string {
					pairs, err := txn.Scan(bg, start, end, limit)
					return fmt.Sprintf("%q %s", pairs, class(err))
				})
			case "commit":
				do(rt, i, "Commit", func(txn kv.Txn) string { return class(txn.Commit(bg)) })
				txns[i] = nil
			case "rollback":
				do(rt, i, "Rollback", func(txn kv.Txn) string { txn.Rollback(); return "" })
				txns[i] = nil
			}
		}
	})
}

func class(err error) string {
	for _, e := range []error{kv.ErrNotFound, kv.ErrConflict, kv.ErrReadOnly, kv.ErrTxnDone, kv.ErrInvalid, kv.ErrClosed} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	if err != nil {
		return "other: " + err.Error()
	}
	return "ok"
}
