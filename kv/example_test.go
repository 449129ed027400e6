package kv_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/kv/memkv"
)

// increment adds one to the counter at key, retrying the whole transaction
// on a serialization conflict.
func increment(ctx context.Context, s kv.Store, key []byte) error {
	for {
		txn, err := s.Begin(ctx, kv.TxnOptions{})
		if err != nil {
			return err
		}
		n := 0
		v, err := txn.Get(ctx, key)
		switch {
		case errors.Is(err, kv.ErrNotFound):
		case err != nil:
			txn.Rollback()
			return err
		default:
			if n, err = strconv.Atoi(string(v)); err != nil {
				txn.Rollback()
				return err
			}
		}
		if err := txn.Set(key, strconv.AppendInt(nil, int64(n+1), 10)); err != nil {
			txn.Rollback()
			return err
		}
		err = txn.Commit(ctx)
		if !errors.Is(err, kv.ErrConflict) {
			return err // nil: committed and durable
		}
	}
}

func Example() {
	ctx := context.Background()
	s := memkv.New()
	defer s.Close()
	for range 3 {
		if err := increment(ctx, s, []byte("counter")); err != nil {
			panic(err)
		}
	}
	txn, _ := s.Begin(ctx, kv.TxnOptions{ReadOnly: true})
	defer txn.Rollback()
	v, _ := txn.Get(ctx, []byte("counter"))
	fmt.Println(string(v))
	// Output: 3
}
