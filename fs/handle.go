package fs

import (
	"context"
	"fmt"
)

// Handle identifies an inode without its changing attributes: what a
// protocol needs to resolve a name or validate a file handle. Operations
// returning a Handle log only it for replay, so a transaction that merely
// walked through a file does not conflict with concurrent changes to the
// file's size, times or change counter (WTF §2.6: abort only when a result
// the caller saw differs).
type Handle struct {
	Ino  Ino
	Gen  uint64
	Type FileType
}

// HandleOf returns ino's handle (ErrNotExist if it has been deleted).
func (t *Txn) HandleOf(ctx context.Context, ino Ino) (Handle, error) {
	res, err := t.do(ctx, "handle", func(ctx context.Context) (any, error) {
		n, err := t.loadInode(ctx, ino)
		if err != nil {
			return nil, err
		}
		return Handle{Ino: ino, Gen: n.Gen, Type: FileType(n.Type)}, nil
	})
	return handleResult(res, err)
}

// Resolve finds name in directory dir, like Lookup, returning its handle.
func (t *Txn) Resolve(ctx context.Context, dir Ino, name string) (Handle, error) {
	res, err := t.do(ctx, "resolve", func(ctx context.Context) (any, error) {
		a, err := t.lookup(ctx, dir, name)
		if err != nil {
			return nil, err
		}
		return handleOf(a), nil
	})
	return handleResult(res, err)
}

// ParentHandle returns the handle of directory dir's parent (the root's
// parent is the root).
func (t *Txn) ParentHandle(ctx context.Context, dir Ino) (Handle, error) {
	res, err := t.do(ctx, "parent-handle", func(ctx context.Context) (any, error) {
		a, err := t.parent(ctx, dir)
		if err != nil {
			return nil, err
		}
		return handleOf(a), nil
	})
	return handleResult(res, err)
}

func handleOf(a Attr) Handle { return Handle{Ino: a.Ino, Gen: a.Gen, Type: a.Type} }

func handleResult(res any, err error) (Handle, error) {
	if err != nil {
		return Handle{}, err
	}
	h, ok := res.(Handle)
	if !ok {
		return Handle{}, fmt.Errorf("%w: internal: handle result %T", ErrIO, res)
	}
	return h, nil
}
