// Package kv defines the transactional key-value interface that all txnfs
// metadata lives in, and the errors every backend reports.
//
// Backends live in sub-packages: memkv (the in-memory reference), pebblekv
// (the embedded default). The conformance suite kvtest is run against every
// backend; see docs/kv.md for why the default backend was chosen.
package kv
