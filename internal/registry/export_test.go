package registry

import "time"

// SetKeyRetry shortens FollowKey's interval for a test.
func SetKeyRetry(r *Registry, d time.Duration) { r.keyRetry = d }
