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

// CheckHandle returns ino's handle like HandleOf, but its read of ino's
// inode record does not join the transaction's read set (when the kv
// store implements kv.UntrackedGetter): a concurrent change to the
// inode's attributes — a directory's times, change counter and cookie
// counter change with every name added or removed in it — does not make
// this transaction conflict. It is for callers that validate a client's
// file handle in a transaction whose operations may be linearized one by
// one (an NFS plain COMPOUND's grouped run), not for atomic ones, and only
// while the transaction has changed nothing: the check is linearized at
// the snapshot, before changes that take effect at the commit, so a check
// after a change would be ordered before that change (the NFS server uses
// HandleOf there; nfs4/server TestPutFHAfterChange).
//
// Why that is sound: a handle's fields (number, generation, type) never
// change while the inode exists, and inode numbers are never reused
// (inoAllocator hands out increasing numbers), so the fact "ino exists
// with this handle" holds from the inode's creation until its removal
// and never again. Seen at the transaction's snapshot S, it holds at the
// commit C too, unless ino was removed in between; then the check is
// linearized at S as an operation of its own, and every later operation
// of the transaction that needs more of the inode than its handle reads
// the record with a tracked read (loadInode) at the same snapshot, which
// conflicts at C. The check is logged like any operation: a replay after
// a conflict runs it again on the fresh snapshot, so an inode removed
// meanwhile (or, if numbers were ever reused, one with another
// generation) makes the replay differ and Commit fail with ErrConflict
// instead of applying the later operations to another inode
// (TestCheckHandle).
func (t *Txn) CheckHandle(ctx context.Context, ino Ino) (Handle, error) {
	res, err := t.do(ctx, "check-handle", func(ctx context.Context) (any, error) {
		n, err := t.peekInode(ctx, ino)
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
