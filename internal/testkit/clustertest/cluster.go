// Package clustertest runs the three-node NATS JetStream cluster described by
// infra/nats (n1.conf, n2.conf, n3.conf, accounts.conf) for tests: real
// nats-server processes built from the nats-server/v2 module version in
// go.mod, on free 127.0.0.1 ports, with store directories in t.TempDir().
//
// The configuration files are used as they are; the per-run values are
// given as command-line overrides, which nats-server applies over the file
// (the same overrides infra/compose uses): -p (client port), -m
// (monitoring port), --cluster (route listener), --routes. Each node runs in
// its own t.TempDir() as working directory, where the files' relative
// store_dir ("./data/<node>") lands. Passwords are set in the servers'
// environment.
package clustertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// Users of account RELAY in infra/nats/accounts.conf.
const (
	UserAdmin      = "admin"
	UserPoller     = "poller"
	UserDispatcher = "dispatcher"
	UserReplier    = "replier"
	// UserSys is the system account's user.
	UserSys = "sys"
)

// NodeNames are the server names of the three configuration files.
var NodeNames = []string{"n1", "n2", "n3"}

// ErrNoRepoRoot is returned when no go.mod is found above the working
// directory.
var ErrNoRepoRoot = errors.New("clustertest: no go.mod above the working directory")

// Password returns the password the cluster gives user (one per user, fixed
// for tests).
func Password(user string) string { return "test-" + user + "-password" }

// PasswordEnv returns the environment accounts.conf reads the passwords
// from, set to the test passwords.
func PasswordEnv() []string {
	var env []string
	for _, u := range []string{UserAdmin, UserPoller, UserDispatcher, UserReplier, UserSys} {
		env = append(env, "RELAY_"+strings.ToUpper(u)+"_PASSWORD="+Password(u))
	}
	return env
}

// RepoRoot returns the directory of the go.mod above the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", ErrNoRepoRoot
		}
		dir = parent
	}
}

// ConfDir returns infra/nats of the repository.
func ConfDir(t testing.TB) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "infra", "nats")
}

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

// ServerBinary builds nats-server from the module version in go.mod, once
// per test process, and returns its path. Call RemoveBinaries from
// TestMain to delete it.
func ServerBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := RepoRoot()
		if err != nil {
			buildErr = err
			return
		}
		if buildDir, err = os.MkdirTemp("", "clustertest-nats-server"); err != nil {
			buildErr = err
			return
		}
		buildBin = filepath.Join(buildDir, "nats-server")
		cmd := exec.Command("go", "build", "-o", buildBin, "github.com/nats-io/nats-server/v2")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build nats-server: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("clustertest: %v", buildErr)
	}
	return buildBin
}

// RemoveBinaries deletes what ServerBinary built.
func RemoveBinaries() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// Node is one nats-server process of a Cluster.
type Node struct {
	Name        string
	ConfPath    string
	ClientPort  int
	ClusterPort int
	MonitorPort int
	// WorkDir is the process's working directory; the configuration's
	// relative store_dir is under it.
	WorkDir string

	c      *Cluster
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	out    pipelinetest.LogBuffer
}

// Cluster is the three-node cluster of infra/nats.
type Cluster struct {
	Nodes []*Node
	t     testing.TB
	bin   string
	// clients collects the asynchronous errors (permission violations,
	// disconnects) of every connection made by Connect.
	clients pipelinetest.LogBuffer
}

// Start starts the three nodes from the files in infra/nats and waits
// until every node reports the same JetStream meta leader. Everything is
// stopped at test cleanup; a failing test gets the servers' logs.
func Start(t testing.TB) *Cluster {
	t.Helper()
	bin := ServerBinary(t)
	dir := ConfDir(t)
	ports := freePorts(t, 3*len(NodeNames))
	c := &Cluster{t: t, bin: bin}
	for i, name := range NodeNames {
		c.Nodes = append(c.Nodes, &Node{
			Name:        name,
			ConfPath:    filepath.Join(dir, name+".conf"),
			ClientPort:  ports[3*i],
			ClusterPort: ports[3*i+1],
			MonitorPort: ports[3*i+2],
			WorkDir:     t.TempDir(),
			c:           c,
		})
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			n.Stop()
		}
		if t.Failed() {
			for _, n := range c.Nodes {
				t.Logf("clustertest: log of %s:\n%s", n.Name, n.out.String())
			}
			t.Logf("clustertest: client errors:\n%s", c.clients.String())
		}
	})
	for _, n := range c.Nodes {
		if err := n.start(); err != nil {
			t.Fatalf("clustertest: start %s: %v", n.Name, err)
		}
	}
	c.WaitMetaLeader(t, 30*time.Second)
	return c
}

func (n *Node) args() []string {
	var routes []string
	for _, o := range n.c.Nodes {
		if o != n {
			routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(o.ClusterPort))
		}
	}
	return []string{
		"-c", n.ConfPath,
		"-p", strconv.Itoa(n.ClientPort),
		"-m", strconv.Itoa(n.MonitorPort),
		"--cluster", "nats://127.0.0.1:" + strconv.Itoa(n.ClusterPort),
		"--routes", strings.Join(routes, ","),
	}
}

func (n *Node) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	cmd := exec.Command(n.c.bin, n.args()...)
	cmd.Dir = n.WorkDir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, PasswordEnv()...)
	cmd.Stdout, cmd.Stderr = &n.out, &n.out
	fmt.Fprintf(&n.out, "--- clustertest: start %s %s ---\n", n.Name, strings.Join(n.args(), " "))
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	n.cmd, n.exited = cmd, exited
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(&n.out, "--- clustertest: %s exited: %v ---\n", n.Name, err)
		close(exited)
	}()
	return n.waitHealthy(15 * time.Second)
}

// waitHealthy waits for the node's /healthz?js-enabled-only=true (the
// server accepts clients and JetStream is on), or for the process to die.
func (n *Node) waitHealthy(timeout time.Duration) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz?js-enabled-only=true", n.MonitorPort)
	return poll(timeout, n.exited, func() (bool, error) {
		resp, err := http.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// ClientURL returns the node's client URL.
func (n *Node) ClientURL() string { return "nats://127.0.0.1:" + strconv.Itoa(n.ClientPort) }

// Running reports whether the node's process is running.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.exited == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// Kill kills the node with SIGKILL (a crash) and waits for it to exit.
func (n *Node) Kill() { n.signal(syscall.SIGKILL) }

// Stop stops the node gracefully (SIGTERM; SIGKILL after 10 s). It is safe to
// call on a stopped node.
func (n *Node) Stop() { n.signal(syscall.SIGTERM) }

func (n *Node) signal(sig syscall.Signal) {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Restart starts a stopped or killed node again on the same ports and store
// directory and waits until it is healthy.
func (n *Node) Restart(t testing.TB) {
	t.Helper()
	if n.Running() {
		t.Fatalf("clustertest: restart %s: still running", n.Name)
	}
	if err := n.start(); err != nil {
		t.Fatalf("clustertest: restart %s: %v", n.Name, err)
	}
}

// Start starts a stopped or killed node again on the same ports and store
// directory and waits until it is healthy: Restart for a goroutine other
// than the test's (which may not call t.Fatal). Starting a running node is
// an error.
func (n *Node) Start() error {
	if n.Running() {
		return fmt.Errorf("clustertest: start %s: still running", n.Name)
	}
	return n.start()
}

// Output returns the node's log.
func (n *Node) Output() string { return n.out.String() }

// URLs returns the client URLs of every node, comma-separated, for
// nats.Connect.
func (c *Cluster) URLs() string {
	var urls []string
	for _, n := range c.Nodes {
		urls = append(urls, n.ClientURL())
	}
	return strings.Join(urls, ",")
}

// ClientErrors returns the asynchronous errors (permission violations,
// disconnects) every connection made by Connect has reported so far, one a
// line.
func (c *Cluster) ClientErrors() string { return c.clients.String() }

// Node returns the node with the given server name.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Options returns the nats.Connect options of user: its password, endless
// reconnects with a short wait, and the given extras.
func Options(user string, extra ...nats.Option) []nats.Option {
	return append([]nats.Option{
		nats.UserInfo(user, Password(user)),
		nats.Name("clustertest-" + user),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50 * time.Millisecond),
		nats.Timeout(2 * time.Second),
	}, extra...)
}

// Connect connects user to the cluster (every node's URL); the connection
// is closed at test cleanup. Its asynchronous errors are logged if the test
// fails, unless extra sets its own error handler.
func (c *Cluster) Connect(t testing.TB, user string, extra ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	logErr := nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		subj := ""
		if sub != nil {
			subj = sub.Subject
		}
		fmt.Fprintf(&c.clients, "%s %s: %v (subscription %q)\n", time.Now().Format(time.StampMilli), user, err, subj)
	})
	nc, err := nats.Connect(c.URLs(), Options(user, append([]nats.Option{logErr}, extra...)...)...)
	if err != nil {
		t.Fatalf("clustertest: connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("clustertest: jetstream: %v", err)
	}
	return nc, js
}

// jsz is the part of /jsz this package reads.
type jsz struct {
	ServerName string `json:"server_name"`
	Meta       *struct {
		Leader      string `json:"leader"`
		ClusterSize int    `json:"cluster_size"`
		Replicas    []struct {
			Name    string `json:"name"`
			Current bool   `json:"current"`
			Offline bool   `json:"offline"`
		} `json:"replicas"`
	} `json:"meta_cluster"`
}

func (n *Node) jsz() (*jsz, error) {
	var j jsz
	if err := n.monitor(http.DefaultClient, "/jsz", &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// monitor decodes the JSON of n's monitoring endpoint path into v.
func (n *Node) monitor(client *http.Client, path string, v any) error {
	resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d%s", n.MonitorPort, path))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// MetaLeader returns the JetStream meta leader every running node agrees
// on, or "" while they do not agree (or one has none).
func (c *Cluster) MetaLeader() string {
	leader := ""
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		j, err := n.jsz()
		if err != nil || j.Meta == nil || j.Meta.Leader == "" {
			return ""
		}
		if leader != "" && j.Meta.Leader != leader {
			return ""
		}
		leader = j.Meta.Leader
	}
	return leader
}

// WaitMetaLeader waits until every running node reports the same meta
// leader and the leader sees every running peer as current.
func (c *Cluster) WaitMetaLeader(t testing.TB, timeout time.Duration) string {
	t.Helper()
	var leader string
	err := poll(timeout, nil, func() (bool, error) {
		leader = c.MetaLeader()
		if leader == "" {
			return false, nil
		}
		ln := c.Node(leader)
		j, err := ln.jsz()
		if err != nil || j.Meta == nil {
			return false, nil
		}
		current := map[string]bool{leader: true}
		for _, r := range j.Meta.Replicas {
			if r.Current && !r.Offline {
				current[r.Name] = true
			}
		}
		for _, n := range c.Nodes {
			if n.Running() && !current[n.Name] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("clustertest: no meta leader: %v", err)
	}
	return leader
}

// Leaders is the part of a node's /jsz?accounts=true&streams=true&consumers=true
// that names the Raft groups' leaders as this node knows them.
type Leaders struct {
	Meta *struct {
		Leader string `json:"leader"`
	} `json:"meta_cluster"`
	Accounts []struct {
		Streams []struct {
			Name      string       `json:"name"`
			Cluster   *GroupLeader `json:"cluster"`
			Consumers []struct {
				Name    string       `json:"name"`
				Cluster *GroupLeader `json:"cluster"`
			} `json:"consumer_detail"`
		} `json:"stream_detail"`
	} `json:"account_details"`
}

// GroupLeader is a Raft group's leader as a node knows it.
type GroupLeader struct {
	Leader      string     `json:"leader"`
	LeaderSince *time.Time `json:"leader_since"`
}

// Leaders reads n's /jsz for its groups' leaders through client.
func (n *Node) Leaders(client *http.Client) (*Leaders, error) {
	var l Leaders
	if err := n.monitor(client, "/jsz?accounts=true&streams=true&consumers=true", &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// WaitStreamCurrent waits until the stream has a leader and every replica
// on a running node is current (caught up), seen by js.
func WaitStreamCurrent(t testing.TB, c *Cluster, js jetstream.JetStream, stream string, timeout time.Duration) {
	t.Helper()
	waitCurrent(t, c, "stream "+stream, timeout, func(ctx context.Context) (*jetstream.ClusterInfo, error) {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return nil, err
		}
		return s.CachedInfo().Cluster, nil
	})
}

// WaitConsumerCurrent is WaitStreamCurrent for a durable consumer: after a
// node restart its leader election is separate from the stream's, and an
// info or fetch request meets no answer until it is done.
func WaitConsumerCurrent(t testing.TB, c *Cluster, js jetstream.JetStream, stream, consumer string, timeout time.Duration) {
	t.Helper()
	waitCurrent(t, c, "consumer "+stream+"/"+consumer, timeout, func(ctx context.Context) (*jetstream.ClusterInfo, error) {
		cons, err := js.Consumer(ctx, stream, consumer)
		if err != nil {
			return nil, err
		}
		return cons.CachedInfo().Cluster, nil
	})
}

func waitCurrent(t testing.TB, c *Cluster, what string, timeout time.Duration, info func(context.Context) (*jetstream.ClusterInfo, error)) {
	t.Helper()
	var last string
	err := poll(timeout, nil, func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		ci, err := info(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		if ci == nil || ci.Leader == "" {
			last = "no leader"
			return false, nil
		}
		seen := map[string]bool{ci.Leader: true}
		for _, r := range ci.Replicas {
			if r.Current && !r.Offline {
				seen[r.Name] = true
			}
		}
		for _, n := range c.Nodes {
			if n.Running() && !seen[n.Name] {
				last = fmt.Sprintf("replica on %s not current (leader %s)", n.Name, ci.Leader)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("clustertest: %s not current: %v (%s)", what, err, last)
	}
}

// errTimeout is returned by poll when cond never held.
var errTimeout = errors.New("timed out")

// errExited is returned by poll when the watched process exited.
var errExited = errors.New("process exited")

// poll evaluates cond on a 25 ms tick until it holds, fails, the timeout
// passes, or dead (if not nil) is closed. The conditions polled here (an
// HTTP endpoint, a Raft group's state) have no event to wait on.
func poll(timeout time.Duration, dead <-chan struct{}, cond func() (bool, error)) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-deadline.C:
			return errTimeout
		case <-dead:
			return errExited
		case <-tick.C:
		}
	}
}

// freePorts reserves n distinct free loopback ports. The listeners are
// closed before the servers bind them; on a busy machine another process
// could take one in between, which makes the start fail loudly.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var lns []net.Listener
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("clustertest: free port: %v", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}
