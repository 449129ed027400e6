package vnfs_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"

	"github.com/txnfs/txnfs/vnfs"
)

// Reading three small files with one call: on NFS this is one COMPOUND
// (vNFS Figure 3) instead of the five round trips per file of a POSIX
// client.
func ExampleFS_VRead() {
	ctx := context.Background()
	f, err := vnfs.Dial(ctx, vnfs.Config{Addr: "127.0.0.1:2049"})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	ios := []vnfs.IO{
		{File: vnfs.P("/home/bob/.bashrc"), Data: make([]byte, 64<<10)},
		{File: vnfs.P("/home/bob/.bash_profile"), Data: make([]byte, 64<<10)},
		{File: vnfs.P("/home/bob/.bash_login"), Data: make([]byte, 64<<10)},
	}
	n, err := f.VRead(ctx, ios)
	for _, io := range ios[:n] {
		fmt.Printf("%s: %d bytes\n", io.File.Path, io.N)
	}
	if err != nil {
		var e *vnfs.Error
		if errors.As(err, &e) && errors.Is(err, fs.ErrNotExist) {
			fmt.Printf("item %d (%s) does not exist; later items were not read\n", e.Index, e.Path)
		}
	}
}

// The same API works on local paths through ordinary system calls.
func ExampleLocal() {
	ctx := context.Background()
	root, _ := os.MkdirTemp("", "vnfs-example-")
	defer os.RemoveAll(root)
	f := vnfs.Local(root)
	defer f.Close()

	if err := vnfs.EnsureDirectory(ctx, f, "/a/b", 0o755); err != nil {
		log.Fatal(err)
	}
	n, err := f.VWrite(ctx, []vnfs.IO{
		{File: vnfs.P("/a/b/x"), Data: []byte("hello"), Flags: vnfs.Create},
		{File: vnfs.P("/a/y"), Data: []byte("world"), Flags: vnfs.Create},
		{File: vnfs.P("/a/y"), Offset: vnfs.AppendOffset, Data: []byte("!")},
	})
	fmt.Println(n, err)
	err = f.VListDir(ctx, []string{"/a"}, vnfs.ListOptions{Mask: vnfs.AttrSize, Recursive: true}, func(e vnfs.DirEntry) error {
		if e.Attr.Type == vnfs.TypeRegular {
			fmt.Printf("%s %d\n", e.Path(), e.Attr.Size)
		}
		return nil
	})
	fmt.Println(err)
	fmt.Println(vnfs.RemoveRecursive(ctx, f, "/a"))
	// Unordered output:
	// 3 <nil>
	// /a/y 6
	// /a/b/x 5
	// <nil>
	// <nil>
}

// A transactional vector commits atomically on a txnfs server; elsewhere
// it is refused before anything runs.
func ExampleFS_Txn() {
	ctx := context.Background()
	f, err := vnfs.Dial(ctx, vnfs.Config{Addr: "127.0.0.1:2049"})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	// Add a user: both files change, or neither does (TC-NFS Figure 1).
	_, err = f.Txn().VWrite(ctx, []vnfs.IO{
		{File: vnfs.P("/etc/passwd"), Offset: vnfs.AppendOffset, Data: []byte("alice:x:1001:1001::/home/alice:/bin/sh\n")},
		{File: vnfs.P("/etc/group"), Offset: vnfs.AppendOffset, Data: []byte("alice:x:1001:\n")},
	})
	switch {
	case errors.Is(err, vnfs.ErrTxnUnsupported):
		fmt.Println("server has no transactions; nothing was changed")
	case err != nil:
		fmt.Println("aborted; nothing was changed:", err)
	}
}

// A transaction over several vector calls (a txnfs server): the program
// reads, decides and writes; other clients see nothing until Commit, which
// applies everything or nothing.
func ExampleBegin() {
	ctx := context.Background()
	f, err := vnfs.Dial(ctx, vnfs.Config{Addr: "127.0.0.1:2049"})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	tx, err := vnfs.Begin(ctx, f)
	if errors.Is(err, vnfs.ErrTxnUnsupported) {
		log.Fatal("the server has no multi-compound transactions")
	} else if err != nil {
		log.Fatal(err)
	}
	defer tx.Close() // aborts unless committed
	// Move a release into place: build it, then switch the link.
	if _, err := tx.VMkdir(ctx, []vnfs.MkdirItem{{Path: "/srv/app/v2", Mode: 0o755}}); err != nil {
		log.Fatal(err)
	}
	if _, err := tx.VWrite(ctx, []vnfs.IO{
		{File: vnfs.P("/srv/app/v2/app.conf"), Data: []byte("port = 8080\n"), Flags: vnfs.Create | vnfs.Truncate},
	}); err != nil {
		log.Fatal(err)
	}
	if _, err := tx.VRemove(ctx, []string{"/srv/app/current"}); err != nil {
		log.Fatal(err)
	}
	if _, err := tx.VSymlink(ctx, []vnfs.SymlinkItem{{Path: "/srv/app/current", Target: "v2"}}); err != nil {
		log.Fatal(err)
	}
	var conflict *vnfs.TxnConflictError
	switch err := tx.Commit(ctx); {
	case errors.As(err, &conflict):
		fmt.Println("someone else changed the tree; nothing applied:\n" + conflict.Report)
	case err != nil:
		log.Fatal(err)
	}
}

// Copying many files on one server without moving their data: NFSv4.2
// COPY where the server has it, reads and writes otherwise.
func ExampleFS_VSCopy() {
	ctx := context.Background()
	f, err := vnfs.Dial(ctx, vnfs.Config{Addr: "127.0.0.1:2049"})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	_, err = f.VSCopy(ctx, []vnfs.CopyItem{
		{Src: vnfs.P("/src/a.c"), Dst: vnfs.P("/dst/a.c"), Length: vnfs.CopyToEnd, Flags: vnfs.Create | vnfs.Truncate},
		{Src: vnfs.P("/src/b.c"), Dst: vnfs.P("/dst/b.c"), Length: vnfs.CopyToEnd, Flags: vnfs.Create | vnfs.Truncate},
	})
	if err != nil {
		log.Fatal(err)
	}
}

// Opening files once and reading them many times by descriptor.
func ExampleFS_VOpen() {
	ctx := context.Background()
	f, err := vnfs.Dial(ctx, vnfs.Config{Addr: "127.0.0.1:2049"})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	items := []vnfs.OpenItem{{Path: "/data/run1"}, {Path: "/data/run2"}}
	if _, err := f.VOpen(ctx, items); err != nil {
		log.Fatal(err)
	}
	defer f.VClose(ctx, []vnfs.FD{items[0].FD, items[1].FD})
	buf1, buf2 := make([]byte, 4096), make([]byte, 4096)
	_, err = f.VRead(ctx, []vnfs.IO{
		{File: vnfs.D(items[0].FD), Offset: 1 << 20, Data: buf1},
		{File: vnfs.D(items[1].FD), Offset: 2 << 20, Data: buf2},
	})
	if err != nil {
		log.Fatal(err)
	}
}
