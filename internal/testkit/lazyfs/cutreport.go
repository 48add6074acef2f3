package lazyfs

// CutReport says what a Cut dropped.
type CutReport struct {
	Files int   // files with unsynced writes or truncates
	Bytes int64 // bytes written to them since their last sync
	// Paths are those files' paths under the mount point ("" for a file
	// no longer linked).
	Paths []string
}
