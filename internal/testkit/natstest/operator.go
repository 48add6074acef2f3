package natstest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// Operator is a decentralized-auth (operator mode) setup: an operator, a
// system account and one JetStream-enabled account whose user
// authenticates with a credentials file, as a managed NATS (Synadia Cloud,
// NGS) or an nsc-provisioned cluster expects.
type Operator struct {
	claims   *jwt.OperatorClaims
	sysPub   string
	resolver *server.MemAccResolver
	// Creds is the user's credentials file content (JWT and seed).
	Creds string
}

// NewOperator creates the keys and JWTs of an operator-mode setup.
func NewOperator(t testing.TB) *Operator {
	t.Helper()
	must := func(err error) {
		if err != nil {
			t.Fatalf("natstest: operator: %v", err)
		}
	}
	okp, err := nkeys.CreateOperator()
	must(err)
	opub, err := okp.PublicKey()
	must(err)
	o := &Operator{claims: jwt.NewOperatorClaims(opub), resolver: &server.MemAccResolver{}}
	account := func(js bool) (nkeys.KeyPair, string) {
		akp, err := nkeys.CreateAccount()
		must(err)
		apub, err := akp.PublicKey()
		must(err)
		ac := jwt.NewAccountClaims(apub)
		if js {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		ajwt, err := ac.Encode(okp)
		must(err)
		must(o.resolver.Store(apub, ajwt))
		return akp, apub
	}
	_, o.sysPub = account(false)
	akp, _ := account(true)
	ukp, err := nkeys.CreateUser()
	must(err)
	upub, err := ukp.PublicKey()
	must(err)
	ujwt, err := jwt.NewUserClaims(upub).Encode(akp)
	must(err)
	seed, err := ukp.Seed()
	must(err)
	creds, err := jwt.FormatUserConfig(ujwt, seed)
	must(err)
	o.Creds = string(creds)
	return o
}

// Start starts a server trusting the operator on storeDir; port -1 picks a
// random port. Restarting on the same dir and port simulates a NATS
// restart.
func (o *Operator) Start(t testing.TB, storeDir string, port int) *Server {
	t.Helper()
	return start(t, &server.Options{
		Host:             "127.0.0.1",
		Port:             port,
		JetStream:        true,
		StoreDir:         storeDir,
		NoLog:            true,
		NoSigs:           true,
		TrustedOperators: []*jwt.OperatorClaims{o.claims},
		SystemAccount:    o.sysPub,
		AccountResolver:  o.resolver,
	})
}

// Connect dials url as the operator's user, like natstest.Connect.
func (o *Operator) Connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "user.creds")
	if err := os.WriteFile(file, []byte(o.Creds), 0o600); err != nil {
		t.Fatalf("natstest: %v", err)
	}
	return connect(t, url, nats.UserCredentials(file))
}
