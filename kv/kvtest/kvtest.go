package kvtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/txnfs/txnfs/kv"
)

// Opener returns a fresh, empty store for one subtest. The opener owns
// closing it (typically with t.Cleanup); Close must tolerate being called
// again after the suite closed the store itself.
type Opener func(t *testing.T) kv.Store

// Run runs the conformance suite against the stores that open returns, one
// subtest per property. Subtests do not run in parallel with each other.
func Run(t *testing.T, open Opener) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, kv.Store)
	}{
		{"Basic", testBasic},
		{"Scan", testScan},
		{"ByteKeys", testByteKeys},
		{"ReadYourWrites", testReadYourWrites},
		{"SnapshotIsolation", testSnapshotIsolation},
		{"RealTime", testRealTime},
		{"ReadWriteConflict", testReadWriteConflict},
		{"ReadMissConflict", testReadMissConflict},
		{"Untracked", testUntracked},
		{"WriteSkew", testWriteSkew},
		{"Phantom", testPhantom},
		{"ScanLimitRule", testScanLimitRule},
		{"BlindWrites", testBlindWrites},
		{"NoFalseConflicts", testNoFalseConflicts},
		{"ReadOnly", testReadOnly},
		{"TxnDone", testTxnDone},
		{"Invalid", testInvalid},
		{"LargeValues", testLargeValues},
		{"Context", testContext},
		{"Closed", testClosed},
		{"Version", testVersion},
		{"CounterStress", testCounterStress},
		{"BankStress", testBankStress},
		{"Model", testModel},
		{"History", testHistory},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

// Long reports whether the long stress variants were asked for: not
// -short, and KVTEST_LONG=1 in the environment.
func Long() bool {
	return !testing.Short() && os.Getenv("KVTEST_LONG") == "1"
}

// Seed returns the seed for a randomized test: KVTEST_SEED if set, else a
// fresh one. The seed is logged if the test fails.
func Seed(t testing.TB) uint64 {
	t.Helper()
	seed := rand.Uint64()
	if s := os.Getenv("KVTEST_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("bad KVTEST_SEED %q: %v", s, err)
		}
		seed = v
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("rerun with KVTEST_SEED=%d", seed)
		}
	})
	return seed
}

var bg = context.Background()

func begin(t tb, s kv.Store, ro bool) kv.Txn {
	t.Helper()
	txn, err := s.Begin(bg, kv.TxnOptions{ReadOnly: ro})
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	return txn
}

// put commits key/value pairs given as alternating strings; a value of
// "\x00DEL" deletes the key.
func put(t tb, s kv.Store, kvs ...string) {
	t.Helper()
	txn := begin(t, s, false)
	defer txn.Rollback()
	for i := 0; i+1 < len(kvs); i += 2 {
		var err error
		if kvs[i+1] == del {
			err = txn.Delete([]byte(kvs[i]))
		} else {
			err = txn.Set([]byte(kvs[i]), []byte(kvs[i+1]))
		}
		if err != nil {
			t.Fatalf("write %q: %v", kvs[i], err)
		}
	}
	if err := txn.Commit(bg); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

const del = "\x00DEL"

// getOK reads key in its own read-only transaction.
func getOK(t tb, s kv.Store, key string) (string, bool) {
	t.Helper()
	txn := begin(t, s, true)
	defer txn.Rollback()
	return txnGet(t, txn, key)
}

func txnGet(t tb, txn kv.Txn, key string) (string, bool) {
	t.Helper()
	v, err := txn.Get(bg, []byte(key))
	if errors.Is(err, kv.ErrNotFound) {
		return "", false
	}
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return string(v), true
}

func wantGet(t tb, txn kv.Txn, key, want string) {
	t.Helper()
	got, ok := txnGet(t, txn, key)
	if want == del {
		if ok {
			t.Fatalf("Get(%q) = %q, want not found", key, got)
		}
		return
	}
	if !ok || got != want {
		t.Fatalf("Get(%q) = %q, %v; want %q", key, got, ok, want)
	}
}

func scanStr(t tb, txn kv.Txn, start, end []byte, limit int) string {
	t.Helper()
	pairs, err := txn.Scan(bg, start, end, limit)
	if err != nil {
		t.Fatalf("Scan(%q, %q, %d): %v", start, end, limit, err)
	}
	var b bytes.Buffer
	for i, p := range pairs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%s", p.Key, p.Value)
	}
	return b.String()
}

func commit(t tb, txn kv.Txn) {
	t.Helper()
	if err := txn.Commit(bg); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

func wantConflict(t tb, txn kv.Txn) {
	t.Helper()
	if err := txn.Commit(bg); !errors.Is(err, kv.ErrConflict) {
		t.Fatalf("Commit = %v, want ErrConflict", err)
	}
}

func testBasic(t *testing.T, s kv.Store) {
	txn := begin(t, s, false)
	wantGet(t, txn, "a", del)
	if err := txn.Set([]byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := txn.Set([]byte("b"), nil); err != nil {
		t.Fatal(err)
	}
	commit(t, txn)

	txn = begin(t, s, false)
	wantGet(t, txn, "a", "1")
	wantGet(t, txn, "b", "")
	if err := txn.Set([]byte("a"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	if err := txn.Delete([]byte("b")); err != nil {
		t.Fatal(err)
	}
	if err := txn.Delete([]byte("never")); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	commit(t, txn)
	if v, ok := getOK(t, s, "a"); !ok || v != "2" {
		t.Fatalf("a = %q, %v; want 2", v, ok)
	}
	if _, ok := getOK(t, s, "b"); ok {
		t.Fatal("b still present after Delete")
	}

	// Ownership: the store copies what it is given, and what it returns
	// belongs to the caller.
	txn = begin(t, s, false)
	k, v := []byte("own"), []byte("value")
	if err := txn.Set(k, v); err != nil {
		t.Fatal(err)
	}
	k[0], v[0] = 'X', 'X'
	got, err := txn.Get(bg, []byte("own"))
	if err != nil || string(got) != "value" {
		t.Fatalf("Get after caller reused buffers = %q, %v", got, err)
	}
	got[0] = 'Y'
	commit(t, txn)
	txn = begin(t, s, true)
	defer txn.Rollback()
	wantGet(t, txn, "own", "value")
	pairs, err := txn.Scan(bg, []byte("own"), nil, 0)
	if err != nil || len(pairs) != 1 {
		t.Fatalf("Scan = %v, %v", pairs, err)
	}
	pairs[0].Value[0] = 'Z'
	wantGet(t, txn, "own", "value")
}

func testScan(t *testing.T, s kv.Store) {
	put(t, s, "a", "1", "b", "2", "c", "3", "d", "4", "e", "5")
	txn := begin(t, s, true)
	defer txn.Rollback()
	for _, tc := range []struct {
		start, end string
		nilEnd     bool
		limit      int
		want       string
	}{
		{"", "", true, 0, "a=1 b=2 c=3 d=4 e=5"},
		{"b", "d", false, 0, "b=2 c=3"},
		{"b", "", true, 0, "b=2 c=3 d=4 e=5"},
		{"bb", "dd", false, 0, "c=3 d=4"},
		{"a", "f", false, 2, "a=1 b=2"},
		{"a", "", true, 10, "a=1 b=2 c=3 d=4 e=5"},
		{"a", "", true, -1, "a=1 b=2 c=3 d=4 e=5"},
		{"c", "c", false, 0, ""},
		{"d", "b", false, 0, ""},
		{"f", "", true, 0, ""},
		{"", "a", false, 0, ""},
		{"e", "", true, 1, "e=5"},
	} {
		var end []byte
		if !tc.nilEnd {
			end = []byte(tc.end)
		}
		var start []byte
		if tc.start != "" {
			start = []byte(tc.start)
		}
		if got := scanStr(t, txn, start, end, tc.limit); got != tc.want {
			t.Errorf("Scan(%q, %q, %d) = %q, want %q", tc.start, end, tc.limit, got, tc.want)
		}
	}
}

func testByteKeys(t *testing.T, s kv.Store) {
	keys := [][]byte{{0x00}, {0x00, 0x00}, {0x00, 0xff}, {0x01}, {0x7f}, {0x80}, {0xfe, 0xff}, {0xff}, {0xff, 0x00}, {0xff, 0xff}, {0xff, 0xff, 0xff}}
	txn := begin(t, s, false)
	for i := len(keys) - 1; i >= 0; i-- {
		if err := txn.Set(keys[i], []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	commit(t, txn)
	txn = begin(t, s, true)
	defer txn.Rollback()
	pairs, err := txn.Scan(bg, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(pairs) != len(keys) {
		t.Fatalf("Scan returned %d pairs, want %d", len(pairs), len(keys))
	}
	for i, p := range pairs {
		if !bytes.Equal(p.Key, keys[i]) || !bytes.Equal(p.Value, []byte{byte(i)}) {
			t.Fatalf("pair %d = %x=%x, want %x=%x", i, p.Key, p.Value, keys[i], []byte{byte(i)})
		}
	}
	// Prefix scans at the top of the key space.
	for _, tc := range []struct {
		prefix []byte
		want   int
	}{{[]byte{0xff}, 4}, {[]byte{0xff, 0xff}, 2}, {[]byte{0x00}, 3}, {[]byte{0xfe}, 1}} {
		pairs, err := txn.Scan(bg, tc.prefix, kv.PrefixEnd(tc.prefix), 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(pairs) != tc.want {
			t.Errorf("prefix %x: %d pairs, want %d", tc.prefix, len(pairs), tc.want)
		}
	}
}

func testReadYourWrites(t *testing.T, s kv.Store) {
	put(t, s, "a", "1", "c", "3", "e", "5", "g", "7")
	txn := begin(t, s, false)
	defer txn.Rollback()
	for _, w := range [][2]string{{"b", "2"}, {"c", "33"}, {"e", del}, {"f", "6"}, {"h", "8"}, {"x", del}} {
		var err error
		if w[1] == del {
			err = txn.Delete([]byte(w[0]))
		} else {
			err = txn.Set([]byte(w[0]), []byte(w[1]))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	wantGet(t, txn, "b", "2")
	wantGet(t, txn, "c", "33")
	wantGet(t, txn, "e", del)
	wantGet(t, txn, "x", del)
	for _, tc := range []struct {
		start, end string
		limit      int
		want       string
	}{
		{"a", "z", 0, "a=1 b=2 c=33 f=6 g=7 h=8"},
		{"a", "z", 3, "a=1 b=2 c=33"},
		{"d", "z", 1, "f=6"},
		{"e", "f", 0, ""},
		{"e", "g", 0, "f=6"},
		{"h", "z", 0, "h=8"},
	} {
		if got := scanStr(t, txn, []byte(tc.start), []byte(tc.end), tc.limit); got != tc.want {
			t.Errorf("Scan(%q, %q, %d) = %q, want %q", tc.start, tc.end, tc.limit, got, tc.want)
		}
	}
	// Set after Delete and Delete after Set.
	if err := txn.Set([]byte("e"), []byte("55")); err != nil {
		t.Fatal(err)
	}
	if err := txn.Delete([]byte("b")); err != nil {
		t.Fatal(err)
	}
	if got := scanStr(t, txn, []byte("a"), []byte("z"), 0); got != "a=1 c=33 e=55 f=6 g=7 h=8" {
		t.Errorf("Scan after rewrites = %q", got)
	}
	commit(t, txn)
	ro := begin(t, s, true)
	defer ro.Rollback()
	if got := scanStr(t, ro, nil, nil, 0); got != "a=1 c=33 e=55 f=6 g=7 h=8" {
		t.Errorf("committed state = %q", got)
	}
}

func testSnapshotIsolation(t *testing.T, s kv.Store) {
	put(t, s, "a", "1", "b", "2")
	for _, ro := range []bool{true, false} {
		t1 := begin(t, s, ro)
		wantGet(t, t1, "a", "1")
		put(t, s, "a", "10", "b", del, "c", "30")
		wantGet(t, t1, "a", "1")
		wantGet(t, t1, "b", "2")
		wantGet(t, t1, "c", del)
		if got := scanStr(t, t1, nil, nil, 0); got != "a=1 b=2" {
			t.Fatalf("readOnly=%v: snapshot scan = %q", ro, got)
		}
		t1.Rollback()
		put(t, s, "a", "1", "b", "2", "c", del)
	}
}

// testRealTime checks that a transaction that begins after another's
// Commit returned sees its writes, even while other commits are in flight.
func testRealTime(t *testing.T, s kv.Store) {
	const writers, rounds = 4, 25
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range rounds {
				key := fmt.Appendf(nil, "rt/%d", w)
				txn, err := s.Begin(bg, kv.TxnOptions{})
				if err != nil {
					errc <- err
					return
				}
				if err := txn.Set(key, []byte(strconv.Itoa(i))); err != nil {
					errc <- err
					return
				}
				if err := txn.Commit(bg); err != nil {
					errc <- err
					return
				}
				ro, err := s.Begin(bg, kv.TxnOptions{ReadOnly: true})
				if err != nil {
					errc <- err
					return
				}
				v, err := ro.Get(bg, key)
				ro.Rollback()
				if err != nil || string(v) != strconv.Itoa(i) {
					errc <- fmt.Errorf("writer %d read %q, %v after committing %d", w, v, err, i)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

func testReadWriteConflict(t *testing.T, s kv.Store) {
	put(t, s, "x", "1")
	t1 := begin(t, s, false)
	wantGet(t, t1, "x", "1")
	if err := t1.Set([]byte("y"), []byte("from t1")); err != nil {
		t.Fatal(err)
	}
	put(t, s, "x", "2")
	wantConflict(t, t1)
	if _, ok := getOK(t, s, "y"); ok {
		t.Fatal("a conflicting transaction's write was applied")
	}
	// A scan read conflicts the same way.
	t2 := begin(t, s, false)
	scanStr(t, t2, []byte("x"), []byte("xz"), 0)
	if err := t2.Set([]byte("y"), []byte("from t2")); err != nil {
		t.Fatal(err)
	}
	put(t, s, "x", del)
	wantConflict(t, t2)
	// Rollback after a failed Commit is a no-op.
	t2.Rollback()
}

func testReadMissConflict(t *testing.T, s kv.Store) {
	t1 := begin(t, s, false)
	wantGet(t, t1, "lock", del)
	if err := t1.Set([]byte("lock"), []byte("t1")); err != nil {
		t.Fatal(err)
	}
	t2 := begin(t, s, false)
	wantGet(t, t2, "lock", del)
	if err := t2.Set([]byte("lock"), []byte("t2")); err != nil {
		t.Fatal(err)
	}
	commit(t, t2)
	wantConflict(t, t1)
	if v, _ := getOK(t, s, "lock"); v != "t2" {
		t.Fatalf("lock = %q, want t2", v)
	}
}

// testUntracked checks kv.UntrackedGetter, for stores that implement it:
// an untracked read sees the snapshot and the transaction's own writes,
// and a concurrent change to the key does not fail the commit, while a
// tracked read of the same key would.
func testUntracked(t *testing.T, s kv.Store) {
	t1 := begin(t, s, false)
	_, ok := t1.(kv.UntrackedGetter)
	t1.Rollback()
	if !ok {
		t.Skip("transactions do not implement kv.UntrackedGetter")
	}
	untracked := func(txn kv.Txn, key, want string) {
		t.Helper()
		v, err := txn.(kv.UntrackedGetter).GetUntracked(context.Background(), []byte(key))
		got := string(v)
		if errors.Is(err, kv.ErrNotFound) {
			got = del
		} else if err != nil {
			t.Fatalf("GetUntracked %q: %v", key, err)
		}
		if got != want {
			t.Fatalf("GetUntracked %q = %q, want %q", key, got, want)
		}
	}
	put(t, s, "u", "1")
	t2 := begin(t, s, false)
	untracked(t2, "u", "1")
	untracked(t2, "missing", del)
	if err := t2.Set([]byte("w"), []byte("own")); err != nil {
		t.Fatal(err)
	}
	if err := t2.Delete([]byte("u")); err != nil {
		t.Fatal(err)
	}
	untracked(t2, "w", "own")
	untracked(t2, "u", del)
	t2.Rollback()

	t3 := begin(t, s, false)
	untracked(t3, "u", "1")
	untracked(t3, "missing", del)
	if err := t3.Set([]byte("y"), []byte("t3")); err != nil {
		t.Fatal(err)
	}
	put(t, s, "u", "2", "missing", "now")
	untracked(t3, "u", "1") // still the snapshot
	commit(t, t3)
	if v, _ := getOK(t, s, "y"); v != "t3" {
		t.Fatalf("y = %q, want t3", v)
	}
	// The same with a tracked read conflicts.
	t4 := begin(t, s, false)
	wantGet(t, t4, "u", "2")
	if err := t4.Set([]byte("y"), []byte("t4")); err != nil {
		t.Fatal(err)
	}
	put(t, s, "u", "3")
	wantConflict(t, t4)
	// Ended transactions refuse untracked reads too.
	if _, err := t4.(kv.UntrackedGetter).GetUntracked(context.Background(), []byte("u")); !errors.Is(err, kv.ErrTxnDone) {
		t.Fatalf("GetUntracked after Commit: %v, want ErrTxnDone", err)
	}
}

// testWriteSkew is the two-doctors example: each doctor goes off call if the
// other is still on call. Under snapshot isolation both would commit and
// nobody would be on call; serializability lets only one of them commit.
func testWriteSkew(t *testing.T, s kv.Store) {
	put(t, s, "oncall/alice", "yes", "oncall/bob", "yes")
	offCall := func(me, other string) kv.Txn {
		txn := begin(t, s, false)
		if v, _ := txnGet(t, txn, "oncall/"+other); v != "yes" {
			t.Fatalf("%s sees %s off call", me, other)
		}
		if err := txn.Set([]byte("oncall/"+me), []byte("no")); err != nil {
			t.Fatal(err)
		}
		return txn
	}
	ta, tb := offCall("alice", "bob"), offCall("bob", "alice")
	errA, errB := ta.Commit(bg), tb.Commit(bg)
	if errA == nil && errB == nil {
		t.Fatal("write skew: both doctors went off call")
	}
	for _, err := range []error{errA, errB} {
		if err != nil && !errors.Is(err, kv.ErrConflict) {
			t.Fatalf("Commit = %v, want nil or ErrConflict", err)
		}
	}
	a, _ := getOK(t, s, "oncall/alice")
	b, _ := getOK(t, s, "oncall/bob")
	if a != "yes" && b != "yes" {
		t.Fatalf("nobody on call: alice=%q bob=%q", a, b)
	}
	// The same with scans instead of point reads.
	put(t, s, "oncall/alice", "yes", "oncall/bob", "yes")
	scanOff := func(me string) kv.Txn {
		txn := begin(t, s, false)
		if got := scanStr(t, txn, []byte("oncall/"), kv.PrefixEnd([]byte("oncall/")), 0); got != "oncall/alice=yes oncall/bob=yes" {
			t.Fatalf("scan = %q", got)
		}
		if err := txn.Set([]byte("oncall/"+me), []byte("no")); err != nil {
			t.Fatal(err)
		}
		return txn
	}
	ta, tb = scanOff("alice"), scanOff("bob")
	if errA, errB := ta.Commit(bg), tb.Commit(bg); errA == nil && errB == nil {
		t.Fatal("write skew through scans: both doctors went off call")
	}
}

func testPhantom(t *testing.T, s kv.Store) {
	put(t, s, "dir/a", "1", "dir/c", "3")
	for _, limit := range []int{0, 5} {
		t1 := begin(t, s, false)
		if got := scanStr(t, t1, []byte("dir/"), kv.PrefixEnd([]byte("dir/")), limit); got != "dir/a=1 dir/c=3" {
			t.Fatalf("scan = %q", got)
		}
		if err := t1.Set([]byte("count"), []byte("2")); err != nil {
			t.Fatal(err)
		}
		put(t, s, "dir/b", "2")
		wantConflict(t, t1)
		if _, ok := getOK(t, s, "count"); ok {
			t.Fatal("phantom: count was written")
		}
		put(t, s, "dir/b", del)
	}
	// An insert after the last key of an unbounded scan is a phantom too.
	t1 := begin(t, s, false)
	scanStr(t, t1, []byte("dir/"), nil, 0)
	if err := t1.Set([]byte("aaa"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	put(t, s, "zzz", "late")
	wantConflict(t, t1)
	// A delete inside a scanned range conflicts as well.
	t1 = begin(t, s, false)
	scanStr(t, t1, []byte("dir/"), kv.PrefixEnd([]byte("dir/")), 0)
	if err := t1.Set([]byte("aaa"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	put(t, s, "dir/a", del)
	wantConflict(t, t1)
}

// testScanLimitRule checks the read range of a scan that hit its limit:
// [start, last returned key].
func testScanLimitRule(t *testing.T, s kv.Store) {
	put(t, s, "r/a", "1", "r/c", "3", "r/e", "5")
	// Insert inside [start, last]: conflict.
	t1 := begin(t, s, false)
	if got := scanStr(t, t1, []byte("r/"), []byte("r0"), 2); got != "r/a=1 r/c=3" {
		t.Fatalf("scan = %q", got)
	}
	if err := t1.Set([]byte("other"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	put(t, s, "r/b", "2")
	wantConflict(t, t1)
	put(t, s, "r/b", del)
	// Insert past the last returned key: not read, so no conflict.
	t2 := begin(t, s, false)
	if got := scanStr(t, t2, []byte("r/"), []byte("r0"), 2); got != "r/a=1 r/c=3" {
		t.Fatalf("scan = %q", got)
	}
	if err := t2.Set([]byte("other"), []byte("y")); err != nil {
		t.Fatal(err)
	}
	put(t, s, "r/d", "4", "r/e", "55")
	commit(t, t2)
}

func testBlindWrites(t *testing.T, s kv.Store) {
	t1 := begin(t, s, false)
	t2 := begin(t, s, false)
	for i, txn := range []kv.Txn{t1, t2} {
		if err := txn.Set([]byte("k"), []byte{'1' + byte(i)}); err != nil {
			t.Fatal(err)
		}
		if err := txn.Delete([]byte("gone")); err != nil {
			t.Fatal(err)
		}
	}
	commit(t, t2)
	commit(t, t1)
	if v, _ := getOK(t, s, "k"); v != "1" {
		t.Fatalf("k = %q, want the last committer's 1", v)
	}
}

func testNoFalseConflicts(t *testing.T, s kv.Store) {
	put(t, s, "p/1", "a", "q/1", "b")
	t1 := begin(t, s, false)
	scanStr(t, t1, []byte("p/"), kv.PrefixEnd([]byte("p/")), 0)
	wantGet(t, t1, "p/1", "a")
	if err := t1.Set([]byte("p/2"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	t2 := begin(t, s, false)
	wantGet(t, t2, "q/1", "b")
	if err := t2.Set([]byte("q/2"), []byte("y")); err != nil {
		t.Fatal(err)
	}
	// Writes outside what t1 and t2 read, committed in between.
	put(t, s, "r/1", "z", "o", "z")
	commit(t, t2)
	commit(t, t1)
	// Reading a key only after writing it reads one's own write.
	t3 := begin(t, s, false)
	if err := t3.Set([]byte("p/1"), []byte("mine")); err != nil {
		t.Fatal(err)
	}
	wantGet(t, t3, "p/1", "mine")
	put(t, s, "p/1", "theirs")
	commit(t, t3)
}

func testReadOnly(t *testing.T, s kv.Store) {
	put(t, s, "a", "1")
	ro := begin(t, s, true)
	if err := ro.Set([]byte("a"), []byte("2")); !errors.Is(err, kv.ErrReadOnly) {
		t.Fatalf("Set in read-only txn = %v, want ErrReadOnly", err)
	}
	if err := ro.Delete([]byte("a")); !errors.Is(err, kv.ErrReadOnly) {
		t.Fatalf("Delete in read-only txn = %v, want ErrReadOnly", err)
	}
	wantGet(t, ro, "a", "1")
	put(t, s, "a", "3")
	// Read-only transactions never conflict.
	commit(t, ro)
}

func testTxnDone(t *testing.T, s kv.Store) {
	for _, finish := range []string{"commit", "rollback", "commit-empty", "commit-readonly"} {
		txn := begin(t, s, finish == "commit-readonly")
		if finish == "commit" || finish == "rollback" {
			if err := txn.Set([]byte("k"), []byte(finish)); err != nil {
				t.Fatal(err)
			}
		}
		if finish == "rollback" {
			txn.Rollback()
		} else {
			commit(t, txn)
		}
		txn.Rollback() // no-op after Commit or Rollback
		txn.Rollback()
		check := func(op string, err error) {
			t.Helper()
			if !errors.Is(err, kv.ErrTxnDone) {
				t.Errorf("after %s: %s = %v, want ErrTxnDone", finish, op, err)
			}
		}
		_, err := txn.Get(bg, []byte("k"))
		check("Get", err)
		_, err = txn.Scan(bg, nil, nil, 0)
		check("Scan", err)
		check("Set", txn.Set([]byte("k"), []byte("v")))
		check("Delete", txn.Delete([]byte("k")))
		check("Commit", txn.Commit(bg))
	}
	if v, _ := getOK(t, s, "k"); v != "commit" {
		t.Fatalf("k = %q, want commit (rollback must discard)", v)
	}
	// After a conflict the transaction is finished too.
	t1 := begin(t, s, false)
	wantGet(t, t1, "k", "commit")
	if err := t1.Set([]byte("j"), nil); err != nil {
		t.Fatal(err)
	}
	put(t, s, "k", "other")
	wantConflict(t, t1)
	if err := t1.Commit(bg); !errors.Is(err, kv.ErrTxnDone) {
		t.Fatalf("Commit after conflict = %v, want ErrTxnDone", err)
	}
}

func testInvalid(t *testing.T, s kv.Store) {
	txn := begin(t, s, false)
	defer txn.Rollback()
	long := bytes.Repeat([]byte{'k'}, kv.MaxKeySize+1)
	for _, key := range [][]byte{nil, {}, long} {
		if _, err := txn.Get(bg, key); !errors.Is(err, kv.ErrInvalid) {
			t.Errorf("Get(%d-byte key) = %v, want ErrInvalid", len(key), err)
		}
		if err := txn.Set(key, []byte("v")); !errors.Is(err, kv.ErrInvalid) {
			t.Errorf("Set(%d-byte key) = %v, want ErrInvalid", len(key), err)
		}
		if err := txn.Delete(key); !errors.Is(err, kv.ErrInvalid) {
			t.Errorf("Delete(%d-byte key) = %v, want ErrInvalid", len(key), err)
		}
	}
	if err := txn.Set([]byte("big"), make([]byte, kv.MaxValueSize+1)); !errors.Is(err, kv.ErrInvalid) {
		t.Errorf("Set(oversized value) = %v, want ErrInvalid", err)
	}
	maxKey := bytes.Repeat([]byte{0xff}, kv.MaxKeySize)
	if err := txn.Set(maxKey, []byte("v")); err != nil {
		t.Fatalf("Set(MaxKeySize key) = %v", err)
	}
	commit(t, txn)
	ro := begin(t, s, true)
	defer ro.Rollback()
	if v, err := ro.Get(bg, maxKey); err != nil || string(v) != "v" {
		t.Fatalf("Get(MaxKeySize key) = %q, %v", v, err)
	}
}

func testLargeValues(t *testing.T, s kv.Store) {
	rng := rand.New(rand.NewPCG(1, 2))
	big := make([]byte, kv.MaxValueSize)
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	mid := big[:1<<20]
	txn := begin(t, s, false)
	if err := txn.Set([]byte("big"), big); err != nil {
		t.Fatal(err)
	}
	if err := txn.Set([]byte("mid"), mid); err != nil {
		t.Fatal(err)
	}
	commit(t, txn)
	txn = begin(t, s, false)
	defer txn.Rollback()
	got, err := txn.Get(bg, []byte("big"))
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("Get(big) = %d bytes, %v; want %d bytes", len(got), err, len(big))
	}
	pairs, err := txn.Scan(bg, []byte("big"), nil, 0)
	if err != nil || len(pairs) != 2 || !bytes.Equal(pairs[0].Value, big) || !bytes.Equal(pairs[1].Value, mid) {
		t.Fatalf("Scan over large values: %d pairs, %v", len(pairs), err)
	}
	if err := txn.Set([]byte("big"), mid); err != nil {
		t.Fatal(err)
	}
	commit(t, txn)
}

func testContext(t *testing.T, s kv.Store) {
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := s.Begin(ctx, kv.TxnOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Begin(cancelled) = %v, want context.Canceled", err)
	}
	put(t, s, "a", "1")
	txn := begin(t, s, false)
	if _, err := txn.Get(ctx, []byte("a")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get(cancelled) = %v, want context.Canceled", err)
	}
	if _, err := txn.Scan(ctx, nil, nil, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Scan(cancelled) = %v, want context.Canceled", err)
	}
	if err := txn.Set([]byte("a"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	if err := txn.Commit(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit(cancelled) = %v, want context.Canceled", err)
	}
	if v, _ := getOK(t, s, "a"); v != "1" {
		t.Fatalf("a = %q after a cancelled Commit, want 1", v)
	}
	txn.Rollback()
	dctx, dcancel := context.WithDeadline(bg, time.Unix(0, 0))
	defer dcancel()
	txn = begin(t, s, true)
	defer txn.Rollback()
	if _, err := txn.Get(dctx, []byte("a")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get(expired) = %v, want context.DeadlineExceeded", err)
	}
}

func testClosed(t *testing.T, s kv.Store) {
	put(t, s, "a", "1")
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := s.Begin(bg, kv.TxnOptions{}); !errors.Is(err, kv.ErrClosed) {
		t.Fatalf("Begin after Close = %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// tb is the part of testing.TB that the helpers need; *rapid.T has it too.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// testVersion checks kv.Versioned, if the store implements it: a
// transaction whose SnapshotVersion equals the store's Version reads what
// a transaction begun then reads, and a commit that wrote something moves
// the Version past every earlier snapshot's.
func testVersion(t *testing.T, s kv.Store) {
	vs, ok := s.(kv.Versioned)
	if !ok {
		t.Skip("store does not implement kv.Versioned")
	}
	snapVersion := func(txn kv.Txn) uint64 {
		t.Helper()
		vt, ok := txn.(kv.VersionedTxn)
		if !ok {
			t.Fatalf("%T: a Versioned store's Txn does not implement kv.VersionedTxn", txn)
		}
		return vt.SnapshotVersion()
	}
	seed := Seed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	keys := []string{"a", "b", "c", "d"}
	var open []kv.Txn
	defer func() {
		for _, txn := range open {
			txn.Rollback()
		}
	}()
	for step := 0; step < 300; step++ {
		switch op := rng.IntN(4); {
		case op == 0 && len(open) < 8: // begin (read-only or read-write)
			txn := begin(t, s, rng.IntN(2) == 0)
			if got, now := snapVersion(txn), vs.Version(); got != now {
				t.Fatalf("step %d: a transaction begun without concurrent commits has SnapshotVersion %d, store Version %d", step, got, now)
			}
			open = append(open, txn)
		case op == 1: // commit a write from another transaction
			before := vs.Version()
			put(t, s, keys[rng.IntN(len(keys))], fmt.Sprint(step))
			if after := vs.Version(); after == before {
				t.Fatalf("step %d: Version %d did not change across a commit", step, after)
			}
		case op == 2 && len(open) > 0: // compare an open snapshot with a fresh one
			txn := open[rng.IntN(len(open))]
			if snapVersion(txn) != vs.Version() {
				continue
			}
			fresh := begin(t, s, true)
			for _, k := range keys {
				a, aok := txnGet(t, txn, k)
				b, bok := txnGet(t, fresh, k)
				if a != b || aok != bok {
					fresh.Rollback()
					t.Fatalf("step %d: versions equal but key %q reads %q/%v in the snapshot and %q/%v fresh", step, k, a, aok, b, bok)
				}
			}
			fresh.Rollback()
		case op == 3 && len(open) > 0: // end one
			i := rng.IntN(len(open))
			open[i].Rollback()
			open = append(open[:i], open[i+1:]...)
		}
	}
	// A snapshot older than a commit is never reported current.
	txn := begin(t, s, true)
	open = append(open, txn)
	put(t, s, "a", "last")
	if snapVersion(txn) == vs.Version() {
		t.Fatalf("a snapshot taken before a commit has the store's current Version %d", vs.Version())
	}
}
