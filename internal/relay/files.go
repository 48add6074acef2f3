package relay

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/filecache"
)

// fileCache is FileCache as the dispatcher takes it (nil stays nil).
func (rt *Runtime) fileCache() dispatcher.Files {
	if c := rt.FileCache(); c != nil {
		return c
	}
	return nil
}

// FileCache is the attachment cache (MOLECULE_FILES_DIR) of this process's
// dispatcher and tools, nil when it is off or no directory can be found.
func (rt *Runtime) FileCache() *filecache.Cache {
	rt.filesOnce.Do(func() { rt.files = rt.newFileCache() })
	return rt.files
}

func (rt *Runtime) newFileCache() *filecache.Cache {
	dir := rt.Cfg.FilesDir
	switch {
	case dir == "off":
		return nil
	case dir == "":
		base, err := os.UserCacheDir()
		if err != nil {
			rt.Log.Warn("relay: no cache directory for attachments; handlers get their URIs only (set MOLECULE_FILES_DIR)", "error", err)
			return nil
		}
		dir = filepath.Join(base, "molecule-relay", "files")
	}
	return &filecache.Cache{Dir: dir, MaxBytes: rt.Cfg.FilesMaxBytes, Clients: rt.startClients(), Lookup: rt.lookup(), Logger: rt.Log.With("stage", "filecache")}
}

// uploader uploads the local files of answers, unless the handler is
// MOLECULE_HANDLER's http: (a remote service, whose paths are not this machine's: it must
// not make the relay upload a local file).
func (rt *Runtime) uploader() dispatcher.Uploads {
	if h := strings.ToLower(rt.Cfg.Handler); rt.goHandler == nil && (strings.HasPrefix(h, "http:") || strings.HasPrefix(h, "https:")) {
		return nil
	}
	return rt.Uploader()
}

// Uploader uploads local files to the platform, each once per answer (the
// dispatcher's and the MCP tools').
func (rt *Runtime) Uploader() *filecache.Uploader {
	var secrets []string
	for _, w := range rt.Cfg.Workspaces() {
		secrets = append(secrets, w.Token)
	}
	u := &filecache.Uploader{Clients: rt.startClients(), Lookup: rt.lookup(), Records: rt.Topo.Handled, MaxBytes: rt.Cfg.FilesMaxBytes, Secrets: secrets}
	if rt.reg != nil {
		u.MoreSecrets = rt.reg.reg.Tokens
	}
	return u
}
