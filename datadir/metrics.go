package datadir

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txnfs/txnfs/slice"
)

// Metrics returns a Prometheus collector of the data directory's storage
// counters: the slice store's puts (and how their data was written: staged
// copy, unstaged, lent, into reused space), flushes, reads, checksum
// failures, frees and reuse pool, and the memory tier's hits and size.
// They are read from the stores' own counters at each scrape.
func (e *Engine) Metrics() prometheus.Collector {
	return &engineMetrics{e: e}
}

type engineMetrics struct{ e *Engine }

// engineStat is one exported counter or gauge read from stats of type S.
type engineStat[S any] struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(S) float64
}

func stat[S any](isGauge bool, name, help string, value func(S) float64) engineStat[S] {
	kind := prometheus.CounterValue
	if isGauge {
		kind = prometheus.GaugeValue
	}
	return engineStat[S]{prometheus.NewDesc("txnfs_"+name, help, nil, nil), kind, value}
}

func (m engineStat[S]) metric(s S) prometheus.Metric {
	return prometheus.MustNewConstMetric(m.desc, m.kind, m.value(s))
}

var localStats = []engineStat[slice.LocalStats]{
	stat(false, "slice_puts_total", "Slices stored.", func(s slice.LocalStats) float64 { return float64(s.Puts) }),
	stat(false, "slice_put_bytes_total", "Bytes of slices stored.", func(s slice.LocalStats) float64 { return float64(s.PutBytes) }),
	stat(false, "slice_direct_puts_total", "Slices written with O_DIRECT (staged, unstaged or lent).", func(s slice.LocalStats) float64 { return float64(s.DirectPuts) }),
	stat(false, "slice_unstaged_puts_total", "Direct puts written synchronously from the caller's buffer.", func(s slice.LocalStats) float64 { return float64(s.UnstagedPuts) }),
	stat(false, "slice_lent_puts_total", "Direct puts written in the background from a lent buffer.", func(s slice.LocalStats) float64 { return float64(s.LentPuts) }),
	stat(false, "slice_reuse_puts_total", "Puts into recycled space (an overwrite of written blocks, not an append).", func(s slice.LocalStats) float64 { return float64(s.ReusePuts) }),
	stat(false, "slice_reuse_bytes_total", "Bytes put into recycled space.", func(s slice.LocalStats) float64 { return float64(s.ReuseBytes) }),
	stat(false, "slice_recycled_bytes_total", "Freed bytes kept in the reuse pool instead of punched.", func(s slice.LocalStats) float64 { return float64(s.RecycledBytes) }),
	stat(true, "slice_reuse_pool_bytes", "Bytes in the reuse pool now.", func(s slice.LocalStats) float64 { return float64(s.PoolBytes) }),
	stat(true, "slice_direct_in_flight", "Direct writes started and not yet done.", func(s slice.LocalStats) float64 { return float64(s.DirectInFlight) }),
	stat(false, "slice_syncs_total", "Slice store syncs.", func(s slice.LocalStats) float64 { return float64(s.Syncs) }),
	stat(false, "slice_fsyncs_total", "fdatasync calls on slice backing files.", func(s slice.LocalStats) float64 { return float64(s.Fsyncs) }),
	stat(false, "slice_reads_total", "Slices read from disk.", func(s slice.LocalStats) float64 { return float64(s.Reads) }),
	stat(false, "slice_read_bytes_total", "Bytes of slices read from disk.", func(s slice.LocalStats) float64 { return float64(s.ReadBytes) }),
	stat(false, "slice_corrupt_reads_total", "Slice reads that failed checksum verification (each one is an EIO to a reader).", func(s slice.LocalStats) float64 { return float64(s.Corrupt) }),
	stat(false, "slice_frees_total", "Slices freed by the garbage collector.", func(s slice.LocalStats) float64 { return float64(s.Frees) }),
	stat(false, "slice_free_bytes_total", "Bytes freed by the garbage collector.", func(s slice.LocalStats) float64 { return float64(s.FreeBytes) }),
}

var cacheStats = []engineStat[slice.CacheStats]{
	stat(false, "cache_hits_total", "Memory-tier reads served from memory.", func(c slice.CacheStats) float64 { return float64(c.Hits) }),
	stat(false, "cache_misses_total", "Memory-tier reads that went to the slice store.", func(c slice.CacheStats) float64 { return float64(c.Misses) }),
	stat(false, "cache_evictions_total", "Memory-tier entries evicted for space.", func(c slice.CacheStats) float64 { return float64(c.Evictions) }),
	stat(true, "cache_bytes", "Memory-tier bytes held now (with per-entry overhead).", func(c slice.CacheStats) float64 { return float64(c.Bytes) }),
	stat(true, "cache_entries", "Memory-tier entries held now.", func(c slice.CacheStats) float64 { return float64(c.Entries) }),
}

func (m *engineMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range localStats {
		ch <- d.desc
	}
	if _, ok := m.e.Slices.(*slice.Cache); ok {
		for _, d := range cacheStats {
			ch <- d.desc
		}
	}
}

func (m *engineMetrics) Collect(ch chan<- prometheus.Metric) {
	ls := m.e.local.Stats()
	for _, d := range localStats {
		ch <- d.metric(ls)
	}
	if c, ok := m.e.Slices.(*slice.Cache); ok {
		cs := c.Stats()
		for _, d := range cacheStats {
			ch <- d.metric(cs)
		}
	}
}
