// Package slice stores immutable slices of file data and hands out
// self-contained Pointers to them (WTF §2.1–2.2).
//
// Slices are appended to several backing files; a Pointer names the backing
// file, offset, length and CRC32C, and every read verifies the checksum.
// Slices are never modified; unreferenced ones are found by the metadata
// scan in package fs and released with Free.
package slice
