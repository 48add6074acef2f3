package memory

import "time"

// SetReadCacheFor sets how long s reads a conversation it holds from its
// last message on alone (cacheFor), so that a test need not wait for an
// entry to go stale.
func SetReadCacheFor(s *Store, d time.Duration) { s.cache.staleAfter = d }

// MaxCachedConversations is the read cache's bound on conversations.
const MaxCachedConversations = maxCachedConversations
