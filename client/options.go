package client

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/inbox"
	"github.com/fencepost/fencepost/metrics"
	"github.com/fencepost/fencepost/ownership"
)

// ErrInvalidOption wraps a bad option value.
var ErrInvalidOption = fencing.ErrInvalidOption

// Option configures a Client.
type Option func(*options) error

type options struct {
	nats      []nats.Option
	timeout   time.Duration
	log       *slog.Logger
	ownership []ownership.Option
	metrics   *metrics.Set
}

// DefaultTimeout bounds every JetStream request whose context has no
// deadline.
const DefaultTimeout = 5 * time.Second

// WithTimeout sets the default request timeout.
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: timeout %v must be positive", ErrInvalidOption, d)
		}
		o.timeout = d
		return nil
	}
}

// WithNATSOptions passes options to nats.Connect (credentials, TLS, name).
func WithNATSOptions(opts ...nats.Option) Option {
	return func(o *options) error {
		o.nats = append(o.nats, opts...)
		return nil
	}
}

// WithLogger sets the logger for the client and the stores it opens.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		o.log = l
		return nil
	}
}

// WithMetrics records the operations of every world this client opens
// (claims, seizes, releases, renewals, self-fences, drains, dead letters,
// fenced commits) in m, for example metrics.Default.
func WithMetrics(m *metrics.Set) Option {
	return func(o *options) error {
		o.metrics = m
		return nil
	}
}

// WithOwnershipOptions passes options to every ownership store opened.
func WithOwnershipOptions(opts ...ownership.Option) Option {
	return func(o *options) error {
		o.ownership = append(o.ownership, opts...)
		return nil
	}
}

// Access is how a client is let in and what it trusts: a role's
// credentials or a user and password, the inbox its replies come to, and
// TLS. It is what the command line's --creds, --user, --password,
// --inbox-prefix, --tlscert, --tlskey and --tlsca say. The zero value
// connects in the clear with no credentials.
type Access struct {
	Creds       string `json:"creds,omitempty"`        // a NATS credentials file (WithCreds)
	InboxPrefix string `json:"inbox_prefix,omitempty"` // overrides the credentials' prefix (WithInboxPrefix)
	User        string `json:"user,omitempty"`
	Password    string `json:"password,omitempty"`
	TLSCert     string `json:"tls_cert,omitempty"` // a client certificate, with TLSKey
	TLSKey      string `json:"tls_key,omitempty"`
	TLSCA       string `json:"tls_ca,omitempty"` // the CA the server's certificate must chain to
}

// WithAccess applies what a says, leaving out what it leaves empty.
func WithAccess(a Access) Option {
	return func(o *options) error {
		if a.Creds != "" {
			if err := WithCreds(a.Creds)(o); err != nil {
				return err
			}
		}
		if a.InboxPrefix != "" {
			if err := WithInboxPrefix(a.InboxPrefix)(o); err != nil {
				return err
			}
		}
		if a.User != "" {
			o.nats = append(o.nats, nats.UserInfo(a.User, a.Password))
		}
		if a.TLSCert != "" || a.TLSKey != "" {
			o.nats = append(o.nats, nats.ClientCert(a.TLSCert, a.TLSKey))
		}
		if a.TLSCA != "" {
			o.nats = append(o.nats, nats.RootCAs(a.TLSCA))
		}
		return nil
	}
}

// WithCreds authenticates with a NATS credentials file (nats.UserCredentials)
// and, when the file's user JWT confines the user's replies to an inbox
// prefix of its own (fencepostd --auth issues every user one:
// docs/security.md, "Private inboxes"), uses that prefix for every reply
// subject (nats.CustomInboxPrefix). Without it, such a user's requests
// would get no answers: the server would not let it subscribe to nats.go's
// default inbox. A WithInboxPrefix after it overrides the prefix.
func WithCreds(path string) Option {
	return func(o *options) error {
		prefix, err := inbox.FromCredsFile(path)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidOption, err)
		}
		o.nats = append(o.nats, nats.UserCredentials(path))
		if prefix != "" {
			o.nats = append(o.nats, nats.CustomInboxPrefix(prefix))
		}
		return nil
	}
}

// WithInboxPrefix makes every reply subject of the connection start with
// prefix instead of "_INBOX" (nats.CustomInboxPrefix): the inbox that the
// user's subscribe permissions allow.
func WithInboxPrefix(prefix string) Option {
	return func(o *options) error {
		if prefix == "" || strings.ContainsAny(prefix, "*> \t") || strings.HasSuffix(prefix, ".") {
			return fmt.Errorf("%w: inbox prefix %q: give subject tokens without wildcards, not ending in '.'", ErrInvalidOption, prefix)
		}
		o.nats = append(o.nats, nats.CustomInboxPrefix(prefix))
		return nil
	}
}

// InboxPrefix is the inbox prefix that a user JWT confines its replies to:
// the P of its one subscribe permission "P.>" under "_INBOX" (fencepostd
// --auth: "_INBOX.<user public key>"), or "" when the JWT allows nats.go's
// default inbox. A plain nats.go client of such a user connects with
// nats.CustomInboxPrefix(prefix); the nats CLI with --inbox-prefix.
func InboxPrefix(userJWT string) (string, error) { return inbox.FromJWT(userJWT) }
