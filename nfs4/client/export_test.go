package client

// Internals for the external tests.

func ReplyBoundOf(cp *Compound) int             { return replyBound(cp) }
func CacheThisOf(cp *Compound, lim Limits) bool { return cacheThis(cp, lim) }
func ReplaySafeOf(cp *Compound) bool            { return replaySafe(cp) }
