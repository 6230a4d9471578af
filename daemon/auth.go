package daemon

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/fencepost/fencepost/server"
)

// Roles of fencepostd --auth (docs/security.md).
const (
	RoleProducer = "producer" // posts into mailboxes, nothing else
	RoleOwner    = "owner"    // holds leases and drains the ids it holds
	RoleOperator = "operator" // everything: world add, reset, remove, force seize
)

// Roles lists the roles in the order docs/security.md presents them.
var Roles = []string{RoleProducer, RoleOwner, RoleOperator}

// Grant is one subject a role may publish to (Pub) or subscribe to (Sub),
// and why it needs it. In Subject, <w> stands for the world's name.
type Grant struct {
	Subject string
	Pub     bool // publish (false: subscribe)
	Roles   []string
	Reason  string
}

const (
	pub = true
	sub = false
)

var (
	prodOwner = []string{RoleProducer, RoleOwner}
	ownerOnly = []string{RoleOwner}
)

// Permissions is the table of every subject the producer and owner roles
// may use; the operator may publish and subscribe to everything (">").
// docs/security.md mirrors it, reason by reason: keep them together.
var Permissions = []Grant{
	// Producer (and owner).
	{"fp.<w>.mb.*", pub, prodOwner, "post: the JetStream publish of a message into mailbox <eid> (docs/wire.md Posting); an owner also reposts dead letters"},
	{"$JS.API.STREAM.INFO.FP_MB_<w>", pub, prodOwner, "open the world: the mailbox stream's limits (max_msg_size, the header room a post keeps free)"},
	{"$JS.API.STREAM.INFO.KV_fp_<w>", pub, prodOwner, "open the world: its settings are the bucket stream's metadata (fencepost.world.config); read only"},
	{"_INBOX.>", sub, prodOwner, "replies: the publish acknowledgement of a post and every JetStream API answer arrive on the client's inbox"},

	// Owner only.
	{"$KV.fp_<w>.>", pub, ownerOnly, "ownership records o.*, cursors c.*, drain locks l.*, node leases n.*: every write is a conditional (fenced) publish to the bucket"},
	{"$JS.API.DIRECT.GET.KV_fp_<w>", pub, ownerOnly, "read records, cursors and locks (KV get by direct get)"},
	{"$JS.API.DIRECT.GET.KV_fp_<w>.>", pub, ownerOnly, "read the last entry of a key (direct get by subject)"},
	{"$JS.API.STREAM.MSG.GET.KV_fp_<w>", pub, ownerOnly, "read the last entry of a key at its revision (the fence's revision)"},
	{"$JS.API.CONSUMER.CREATE.KV_fp_<w>", pub, ownerOnly, "watch records (ordered consumer on the bucket) and count records for stat"},
	{"$JS.API.CONSUMER.CREATE.KV_fp_<w>.>", pub, ownerOnly, "the same, with a consumer name and filter subject"},
	{"$JS.API.CONSUMER.INFO.KV_fp_<w>.*", pub, ownerOnly, "the watch's consumer state"},
	{"$JS.API.CONSUMER.DELETE.KV_fp_<w>.*", pub, ownerOnly, "delete the watch's consumer when it ends"},
	{"$JS.API.CONSUMER.MSG.NEXT.KV_fp_<w>.*", pub, ownerOnly, "pull the watch's entries"},
	{"$JS.FC.KV_fp_<w>.>", pub, ownerOnly, "flow control replies of a push watch"},
	{"fp.<w>.dl.*", pub, ownerOnly, "dead-letter a message that failed max_deliveries times"},
	{"$JS.API.DIRECT.GET.FP_MB_<w>", pub, ownerOnly, "drain: batched direct gets of a mailbox"},
	{"$JS.API.DIRECT.GET.FP_MB_<w>.>", pub, ownerOnly, "drain: direct get of the last message of a mailbox"},
	{"$JS.API.STREAM.MSG.GET.FP_MB_<w>", pub, ownerOnly, "stat and dead letters: one message by sequence"},
	{"$JS.API.STREAM.PURGE.FP_MB_<w>", pub, ownerOnly, "drain: purge the committed messages of a mailbox (filter fp.<w>.mb.<eid>, below a sequence), and dead letters after a repost. Not enforced: the same API purges the whole stream (see docs/security.md)"},
	{"$JS.API.STREAM.MSG.DELETE.FP_MB_<w>", pub, ownerOnly, "delete one dead letter after its repost"},
	{"$JS.API.CONSUMER.CREATE.FP_MB_<w>", pub, ownerOnly, "drain of deep mailboxes or many ids: a consumer for that drain (AckNone, memory, one replica)"},
	{"$JS.API.CONSUMER.CREATE.FP_MB_<w>.>", pub, ownerOnly, "the same, with a consumer name and filter subject"},
	{"$JS.API.CONSUMER.INFO.FP_MB_<w>.*", pub, ownerOnly, "that consumer's state"},
	{"$JS.API.CONSUMER.DELETE.FP_MB_<w>.*", pub, ownerOnly, "delete that consumer after the drain (no consumer exists at rest)"},
	{"$JS.API.CONSUMER.MSG.NEXT.FP_MB_<w>.*", pub, ownerOnly, "pull messages from that consumer"},
	{"$JS.FC.FP_MB_<w>.>", pub, ownerOnly, "flow control replies of a worker's ordered consumer on the mailbox stream"},
}

// rolePermissions are the subject permissions of role for world w.
func rolePermissions(role, w string) *natsserver.Permissions {
	if role == RoleOperator {
		return &natsserver.Permissions{
			Publish:   &natsserver.SubjectPermission{Allow: []string{">"}},
			Subscribe: &natsserver.SubjectPermission{Allow: []string{">"}},
		}
	}
	p := &natsserver.Permissions{Publish: &natsserver.SubjectPermission{}, Subscribe: &natsserver.SubjectPermission{}}
	for _, g := range Permissions {
		if !contains(g.Roles, role) {
			continue
		}
		s := strings.ReplaceAll(g.Subject, "<w>", w)
		if g.Pub {
			p.Publish.Allow = append(p.Publish.Allow, s)
		} else {
			p.Subscribe.Allow = append(p.Subscribe.Allow, s)
		}
	}
	// Both roles have subjects on both sides: nats-server reads an empty
	// allow list as "everything allowed".
	if len(p.Publish.Allow) == 0 || len(p.Subscribe.Allow) == 0 {
		panic("daemon: role " + role + " without subjects")
	}
	return p
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Creds are one role's credentials as fencepostd --auth writes them to
// <data dir>/<role>.creds.
type Creds struct {
	User     string
	Password string
}

// NATSOption is the nats.go option that authenticates with c.
func (c Creds) NATSOption() nats.Option { return nats.UserInfo(c.User, c.Password) }

// CredsFile is where fencepostd --auth keeps role's credentials.
func CredsFile(dataDir, role string) string { return filepath.Join(dataDir, role+".creds") }

// ReadCreds reads a credentials file written by fencepostd --auth: lines
// "user: NAME" and "password: SECRET"; '#' starts a comment.
func ReadCreds(path string) (Creds, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Creds{}, err
	}
	var c Creds
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			return Creds{}, fmt.Errorf("%s: %q is not \"key: value\"", path, line)
		}
		switch strings.TrimSpace(k) {
		case "user":
			c.User = strings.TrimSpace(v)
		case "password":
			c.Password = strings.TrimSpace(v)
		default:
			return Creds{}, fmt.Errorf("%s: unknown key %q (user, password)", path, k)
		}
	}
	if c.User == "" || c.Password == "" {
		return Creds{}, fmt.Errorf("%s: user and password are required", path)
	}
	return c, nil
}

func writeCreds(path, role, world string, c Creds) error {
	body := fmt.Sprintf("# fencepost credentials of role %s (world %s), written by fencepostd --auth.\n"+
		"# NATS user and password (not a JWT .creds file): connect with\n"+
		"#   fencepost --user %s --password \"$(sed -n 's/^password: //p' %s.creds)\" ...\n"+
		"# docs/security.md lists what this role may do.\nuser: %s\npassword: %s\n",
		role, world, c.User, role, c.User, c.Password)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// loadOrCreateCreds returns every role's credentials: read from the data
// dir when present (so that a restart keeps clients working, and so that
// the members of a cluster can share them), generated and written there
// otherwise.
func loadOrCreateCreds(dataDir, world string) (map[string]Creds, error) {
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return nil, err
	}
	out := map[string]Creds{}
	for _, role := range Roles {
		path := CredsFile(dataDir, role)
		c, err := ReadCreds(path)
		if err == nil {
			out[role] = c
			continue
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		secret := make([]byte, 24)
		if _, err := rand.Read(secret); err != nil {
			return nil, err
		}
		c = Creds{User: "fp-" + role, Password: hex.EncodeToString(secret)}
		if err := writeCreds(path, role, world, c); err != nil {
			return nil, fmt.Errorf("write %s: %w", path, err)
		}
		out[role] = c
	}
	return out, nil
}

// authUsers turns auth on in opts: one user per role with the role's
// permissions on world w. A nats-server config file that configures
// authentication itself is refused: the two would not combine.
func authUsers(opts *natsserver.Options, creds map[string]Creds, w string) error {
	if len(opts.Users) > 0 || len(opts.Nkeys) > 0 || opts.Username != "" || opts.Authorization != "" || len(opts.TrustedOperators) > 0 || opts.NoAuthUser != "" {
		return fmt.Errorf("%w: auth: the nats-server config file configures authentication itself; use --auth or the file's users, not both", server.ErrConfig)
	}
	for _, role := range Roles {
		c := creds[role]
		opts.Users = append(opts.Users, &natsserver.User{Username: c.User, Password: c.Password, Permissions: rolePermissions(role, w)})
	}
	return nil
}
