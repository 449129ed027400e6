package fs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/txnfs/txnfs/kv"
	"github.com/txnfs/txnfs/meta"
)

// Extended attribute limits (as Linux's).
const (
	MaxXattrName  = 255
	MaxXattrValue = 64 << 10
)

// xattrAllowed applies the namespace rules: "trusted." and "security."
// need root; "user." needs the owner or write permission on regular files
// and directories; other namespaces are not supported.
func (t *Txn) xattrAllowed(n *meta.Inode, name string, write bool) error {
	switch {
	case name == "" || len(name) > MaxXattrName:
		return fmt.Errorf("%w: xattr name of %d bytes", ErrRange, len(name))
	case strings.HasPrefix(name, "trusted.") || strings.HasPrefix(name, "security."):
		if write && !t.cred.isRoot() {
			return ErrPerm
		}
	case strings.HasPrefix(name, "user."):
		if n.Type != uint8(TypeRegular) && n.Type != uint8(TypeDirectory) {
			return ErrPerm
		}
		mask := uint32(AccessRead)
		if write {
			mask = AccessWrite
		}
		return checkAccess(t.cred, n, mask)
	default:
		return fmt.Errorf("%w: xattr namespace of %q", ErrNotSupported, name)
	}
	return nil
}

// GetXattr returns the value of extended attribute name.
func (t *Txn) GetXattr(ctx context.Context, ino Ino, name string) ([]byte, error) {
	res, err := t.do(ctx, "getxattr", func(ctx context.Context) (any, error) {
		n, err := t.loadInode(ctx, ino)
		if err != nil {
			return nil, err
		}
		if err := t.xattrAllowed(n, name, false); err != nil {
			return nil, err
		}
		v, err := t.getRaw(ctx, meta.XattrKey(uint64(ino), name))
		if errors.Is(err, ErrNotExist) {
			return nil, fmt.Errorf("%w: %q", ErrNoAttr, name)
		}
		return v, err
	})
	if err != nil {
		return nil, err
	}
	return res.([]byte), nil
}

// SetXattr sets extended attribute name.
func (t *Txn) SetXattr(ctx context.Context, ino Ino, name string, value []byte, flags XattrFlags) error {
	if err := t.fs.space.admit(ctx, recordGrowth+uint64(len(value))); err != nil {
		return err
	}
	now := t.fs.now().UnixNano()
	_, err := t.do(ctx, "setxattr", func(ctx context.Context) (any, error) {
		if len(value) > MaxXattrValue {
			return nil, fmt.Errorf("%w: xattr value of %d bytes", ErrRange, len(value))
		}
		n, err := t.loadInode(ctx, ino)
		if err != nil {
			return nil, err
		}
		if err := t.xattrAllowed(n, name, true); err != nil {
			return nil, err
		}
		k := meta.XattrKey(uint64(ino), name)
		_, err = t.getRaw(ctx, k)
		exists := err == nil
		if err != nil && !errors.Is(err, ErrNotExist) {
			return nil, err
		}
		if flags.Create && exists {
			return nil, fmt.Errorf("%w: xattr %q", ErrExist, name)
		}
		if flags.Replace && !exists {
			return nil, fmt.Errorf("%w: %q", ErrNoAttr, name)
		}
		// Before the write, so that before this transaction can commit
		// every deleteInode that runs (or replays) scans attributes:
		// one that ran before without scanning read this inode, which
		// the commit below changes, so it replays or this one does.
		t.fs.xattrs.Store(true)
		if err := t.setRaw(ctx, k, value); err != nil {
			return nil, err
		}
		changed(n, now)
		t.putInode(ino, n)
		return nil, nil
	})
	return err
}

// ListXattr lists the names of ino's extended attributes.
func (t *Txn) ListXattr(ctx context.Context, ino Ino) ([]string, error) {
	res, err := t.do(ctx, "listxattr", func(ctx context.Context) (any, error) {
		if _, err := t.loadInode(ctx, ino); err != nil {
			return nil, err
		}
		p := meta.XattrPrefix(uint64(ino))
		pairs, err := t.scanRaw(ctx, p, kv.PrefixEnd(p), 0)
		if err != nil {
			return nil, err
		}
		names := []string{}
		for _, kvp := range pairs {
			_, name, err := meta.ParseXattrKey(kvp.Key)
			if err != nil {
				return nil, err
			}
			names = append(names, name)
		}
		return names, nil
	})
	if err != nil {
		return nil, err
	}
	return res.([]string), nil
}

// RemoveXattr removes extended attribute name.
func (t *Txn) RemoveXattr(ctx context.Context, ino Ino, name string) error {
	now := t.fs.now().UnixNano()
	_, err := t.do(ctx, "removexattr", func(ctx context.Context) (any, error) {
		n, err := t.loadInode(ctx, ino)
		if err != nil {
			return nil, err
		}
		if err := t.xattrAllowed(n, name, true); err != nil {
			return nil, err
		}
		k := meta.XattrKey(uint64(ino), name)
		if _, err := t.getRaw(ctx, k); errors.Is(err, ErrNotExist) {
			return nil, fmt.Errorf("%w: %q", ErrNoAttr, name)
		} else if err != nil {
			return nil, err
		}
		if err := t.deleteRaw(ctx, k); err != nil {
			return nil, err
		}
		changed(n, now)
		t.putInode(ino, n)
		return nil, nil
	})
	return err
}
