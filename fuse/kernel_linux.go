//go:build linux

package fuse

import (
	"encoding/binary"
	"errors"
	"os"
	"reflect"
	"syscall"
	"unsafe"

	raw "github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// notifyIncEpoch is FUSE_NOTIFY_INC_EPOCH (protocol 7.44, Linux 6.16): the
// kernel raises the connection's epoch, and every dentry it cached before
// is looked up again (LOOKUP) at its next use instead of being trusted
// until its entry timeout (fuse_dentry_revalidate compares the dentry's
// epoch with the connection's).
const notifyIncEpoch = 8

// incEpoch sends FUSE_NOTIFY_INC_EPOCH to srv's kernel. go-fuse 2.12.1
// has no call for it (it has PruneNotify, but a prune leaves dentries in
// use alone), so, as hugeReadBuffers and bufLender do, this reaches into
// go-fuse by reflection for the FUSE device and writes the notification
// (an out header with unique 0, error = the notify code, no payload)
// itself. A kernel without the notification answers EINVAL (reported as
// ENOSYS); if go-fuse's internals are not as expected, the error says so
// and TestWritebackSandbox fails.
func incEpoch(srv *raw.Server) error {
	f, err := fuseDevice(srv)
	if err != nil {
		return err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var hdr [16]byte // struct fuse_out_header: len, error, unique
	binary.NativeEndian.PutUint32(hdr[0:], uint32(len(hdr)))
	binary.NativeEndian.PutUint32(hdr[4:], notifyIncEpoch)
	var werr error
	if err := rc.Write(func(fd uintptr) bool {
		_, werr = unix.Write(int(fd), hdr[:])
		return true
	}); err != nil {
		return err
	}
	if errors.Is(werr, syscall.EINVAL) {
		return syscall.ENOSYS
	}
	return werr
}

// fuseDevice returns the FUSE device file go-fuse serves srv from (its
// Server.fuseFD.file).
func fuseDevice(srv *raw.Server) (*os.File, error) {
	errInternals := errors.New("go-fuse's Server.fuseFD.file is not as expected: cannot send FUSE_NOTIFY_INC_EPOCH")
	ffd := reflect.ValueOf(srv).Elem().FieldByName("fuseFD")
	if !ffd.IsValid() || ffd.Kind() != reflect.Pointer || ffd.IsNil() || ffd.Elem().Kind() != reflect.Struct {
		return nil, errInternals
	}
	file := ffd.Elem().FieldByName("file")
	if !file.IsValid() || file.Type() != reflect.TypeFor[*os.File]() {
		return nil, errInternals
	}
	f := *(**os.File)(unsafe.Pointer(file.UnsafeAddr()))
	if f == nil {
		return nil, errInternals
	}
	return f, nil
}

// syncMount writes back the dirty pages and kernel-owned times of the
// mount at dir (syncfs(2) on it): the kernel sends them as WRITE and
// SETATTR requests, which the mount's other request goroutines serve, so
// the caller must not hold anything those requests wait for.
func syncMount(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}
