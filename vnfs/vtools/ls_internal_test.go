package vtools

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/txnfs/txnfs/vnfs"
)

// blockFmt is the fmt-based long listing block replaced in session 8,
// kept as the reference for TestBlockMatchesFmt.
func blockFmt(l *lister, ents []lsEntry, total bool) {
	var blocks uint64
	var wl, wu, wg, ws int
	rows := make([][5]string, len(ents))
	for i, e := range ents {
		a := e.attr
		blocks += a.Space
		size := strconv.FormatUint(a.Size, 10)
		if a.Type == vnfs.TypeBlock || a.Type == vnfs.TypeChar {
			size = fmt.Sprintf("%d, %d", a.Rdev[0], a.Rdev[1])
		}
		m := modeBytes(a)
		rows[i] = [5]string{string(m[:]), strconv.FormatUint(uint64(a.Nlink), 10), l.user(a.Uid), l.group(a.Gid), size}
		wl = max(wl, len(rows[i][1]))
		wu = max(wu, len(rows[i][2]))
		wg = max(wg, len(rows[i][3]))
		ws = max(ws, len(rows[i][4]))
	}
	if total {
		fmt.Fprintf(l.w, "total %d\n", (blocks+1023)/1024)
	}
	for i, e := range ents {
		r := rows[i]
		t := e.attr.Mtime.Local()
		sixMonths := time.Duration(31556952/2) * time.Second
		date := t.Format("Jan _2  2006")
		if t.After(l.now.Add(-sixMonths)) && !t.After(l.now) {
			date = t.Format("Jan _2 15:04")
		}
		fmt.Fprintf(l.w, "%s %*s %-*s %-*s %*s %s %s", r[0], wl, r[1], wu, r[2], wg, r[3], ws, r[4], date, e.name)
		if e.attr.Type == vnfs.TypeSymlink {
			fmt.Fprintf(l.w, " -> %s", e.link)
		}
		fmt.Fprintln(l.w)
	}
}

// TestBlockMatchesFmt compares the append-based block with the fmt-based
// one on random entries: user and group names of different widths (ASCII
// only: the old code measured widths in bytes and padded in runes, which
// the new one does consistently in runes), devices, symlinks, times
// recent, old, in the future and sharing seconds (the date cache).
func TestBlockMatchesFmt(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	names := map[uint32]string{0: "root", 1: "a", 2: "somebody-long", 3: "1000"}
	types := []vnfs.FileType{vnfs.TypeRegular, vnfs.TypeDir, vnfs.TypeSymlink, vnfs.TypeBlock, vnfs.TypeChar, vnfs.TypeFIFO, vnfs.TypeSocket}
	for round := 0; round < 200; round++ {
		n := rng.IntN(20)
		ents := make([]lsEntry, n)
		for i := range ents {
			a := vnfs.Attr{
				Type:  types[rng.IntN(len(types))],
				Mode:  uint32(rng.IntN(0o10000)),
				Nlink: uint32(rng.IntN(3000)),
				Uid:   uint32(rng.IntN(4)),
				Gid:   uint32(rng.IntN(4)),
				Size:  uint64(rng.Int64N(1 << uint(rng.IntN(40)+1))),
				Space: uint64(rng.IntN(1 << 20)),
				Rdev:  [2]uint32{uint32(rng.IntN(300)), uint32(rng.IntN(300))},
				Mtime: now.Add(time.Duration(rng.IntN(3)) * time.Second).Add(-time.Duration(rng.Int64N(int64(400 * 24 * time.Hour)))).Add(time.Duration(rng.IntN(2)) * time.Hour),
			}
			if rng.IntN(4) == 0 {
				a.Mtime = now.Add(-time.Duration(rng.IntN(3)) * time.Second) // shared seconds
			}
			ents[i] = lsEntry{name: fmt.Sprintf("f%d", rng.IntN(1000)), attr: a, link: "target"}
		}
		var got, want bytes.Buffer
		mk := func(w *bytes.Buffer) *lister {
			return &lister{o: LsOptions{Long: true}, w: w, users: names, groups: names, now: now}
		}
		total := rng.IntN(2) == 0
		lg := mk(&got)
		lg.block(ents, total)
		lg.block(ents, total) // again: the buffers and the date cache reused
		lw := mk(&want)
		blockFmt(lw, ents, total)
		blockFmt(lw, ents, total)
		if got.String() != want.String() {
			t.Fatalf("round %d (seed %d):\ngot:\n%s\nwant:\n%s", round, seed, got.String(), want.String())
		}
	}
}
