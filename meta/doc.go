// Package meta is the key schema and record encoding of txnfs metadata in
// the transactional kv store. It knows nothing of file-system semantics
// (that is package fs); it only says where things live and how they are
// encoded, and decodes untrusted bytes without panicking.
//
// Keys (all integers big-endian so that keys sort numerically):
//
//	"i" ino                      -> Inode         one per inode
//	"d" dir  name                -> Dirent        directory entry, by (parent, name)
//	"c" dir  cookie              -> name          readdir order; cookie index of "d"
//	"e" ino  chunk               -> Chunk         slice list of one ChunkSize chunk
//	"r" ino  region              -> Region        layout 1 only: slice list of one
//	                                               RegionSize region (converted to
//	                                               chunks when the FS is opened)
//	"x" ino  name                -> value bytes   extended attribute
//	"o" ino                      -> ""            orphan: nlink 0, still open
//	"m" name                     -> bytes         engine bookkeeping (inode counter,
//	                                               secrets, GC state, "layout")
//
// Records are CBOR arrays (github.com/fxamacker/cbor) prefixed with one
// format byte, decoded with strict size limits: corrupt bytes give an
// error wrapping ErrCorrupt, never a panic or a huge allocation.
package meta
