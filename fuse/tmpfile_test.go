//go:build linux

package fuse

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/txnfs/txnfs/fs"
)

// TestTmpfileReclaim: O_TMPFILE files that are never named are deleted in
// the engine after their last close (the kernel's FORGET unpins them) and
// named ones stay. (Reclaim after a crash is the engine's orphan reclaim,
// tested in fs: TestCreateOrphan.)
func TestTmpfileReclaim(t *testing.T) {
	e := newEnv(t, envOptions{})
	mnt, _ := e.mount()
	ctx := context.Background()
	exists := func(ino uint64) bool {
		err := e.engine.FS.View(ctx, fs.RootCred, func(tx *fs.Txn) error {
			_, err := tx.GetAttr(ctx, fs.Ino(ino))
			return err
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("GetAttr %d: %v", ino, err)
		}
		return err == nil
	}
	tmp := func() (int, uint64) {
		fd, err := unix.Open(mnt, unix.O_TMPFILE|unix.O_WRONLY, 0o600)
		if err != nil {
			t.Fatalf("open(O_TMPFILE): %v", err)
		}
		if _, err := unix.Write(fd, make([]byte, 1<<20)); err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		return fd, st.Ino
	}
	var unnamed []uint64
	for range 3 {
		fd, ino := tmp()
		if !exists(ino) {
			t.Fatalf("open unnamed file %d not found in the engine", ino)
		}
		unix.Close(fd)
		unnamed = append(unnamed, ino)
	}
	fd, named := tmp()
	if err := unix.Linkat(fd, "", unix.AT_FDCWD, filepath.Join(mnt, "named"), unix.AT_EMPTY_PATH); err != nil {
		t.Fatalf("linkat: %v", err)
	}
	unix.Close(fd)
	deadline := time.Now().Add(10 * time.Second)
	for _, ino := range unnamed {
		for exists(ino) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if exists(ino) {
			t.Errorf("unnamed file %d still exists after its last close", ino)
		}
	}
	if !exists(named) {
		t.Errorf("named O_TMPFILE file %d was deleted", named)
	}
	if fi, err := os.Stat(filepath.Join(mnt, "named")); err != nil || fi.Size() != 1<<20 {
		t.Errorf("named file: %v %v", fi, err)
	}
}

// TestTmpfileInSandbox: O_TMPFILE is EOPNOTSUPP while a sandbox is active
// (docs/fuse.md) and works again after it ends.
func TestTmpfileInSandbox(t *testing.T) {
	mnt := mountOne(t)
	if _, err := Control(mnt, OpBegin); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(mnt, unix.O_TMPFILE|unix.O_RDWR, 0o600)
	if err == nil {
		unix.Close(fd)
	}
	wantErrno(t, "open(O_TMPFILE) in a sandbox", err, unix.EOPNOTSUPP)
	if _, err := Control(mnt, OpAbort); err != nil {
		t.Fatal(err)
	}
	fd, err = unix.Open(mnt, unix.O_TMPFILE|unix.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("open(O_TMPFILE) after the sandbox: %v", err)
	}
	unix.Close(fd)
}
