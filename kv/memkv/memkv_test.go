package memkv_test

import (
	"testing"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/kv/kvtest"
	"github.com/txnfs/txnfs/kv/memkv"
)

func TestConformance(t *testing.T) {
	kvtest.Run(t, func(t *testing.T) kv.Store {
		s := memkv.New()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
