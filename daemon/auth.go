package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/jwt/v2"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/fencepost/fencepost/internal/inbox"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/server"
)

// Roles of fencepostd --auth (docs/security.md).
const (
	RoleProducer = "producer" // posts into mailboxes, nothing else
	RoleOwner    = "owner"    // holds leases and drains the ids it holds
	RoleOperator = "operator" // everything: world add, reset, remove, force seize, dlq repost and purge
	// RoleNodeOwner is an owner bound to one node: the owner's rights,
	// except that of the node leases it may write only its own node's
	// (`fencepostd creds add --role owner --node N`; docs/security.md,
	// "One identity per node").
	RoleNodeOwner = "node-owner"
)

// Roles lists the roles in the order docs/security.md presents them.
var Roles = []string{RoleProducer, RoleOwner, RoleOperator}

// Grant is one subject a role may publish to (Pub) or subscribe to (Sub),
// and why it needs it. In Subject, <w> stands for the world's name,
// <user> for the user's public nkey and <node> for the encoded name of
// a node owner's node (wire.EncodeID).
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
	prodOwner = []string{RoleProducer, RoleOwner, RoleNodeOwner}
	ownerOnly = []string{RoleOwner, RoleNodeOwner}
	roleWide  = []string{RoleOwner}     // the owner role's own creds, bound to no node
	nodeBound = []string{RoleNodeOwner} // an owner bound to its node
)

// Permissions is the table of every subject the producer and owner roles
// may use; the operator may publish and subscribe to everything (">").
// docs/security.md mirrors it, reason by reason: keep them together.
var Permissions = []Grant{
	// Producer (and owner).
	{"fp.<w>.mb.*", pub, prodOwner, "post: the JetStream publish of a message into mailbox <eid> (docs/wire.md Posting); an owner also reposts dead letters"},
	{"$JS.API.DIRECT.GET.KV_fp_<w>.$KV.fp_<w>.world", pub, prodOwner, "open the world for posting: its settings entry, by a direct get of that one key (a get by subject in the request's subject takes no sequence or filter: nothing else of the bucket is readable)"},
	{"_INBOX.<user>.>", sub, prodOwner, "replies, on the user's own inbox prefix: the publish acknowledgement of a post and every JetStream API answer (no user may subscribe to another's inbox)"},

	// Owner only.
	{"$JS.API.STREAM.INFO.FP_MB_<w>", pub, ownerOnly, "open the world: the mailbox stream's limits, which a full mailbox names; stat, ls and workers: its subjects' counts"},
	{"$JS.API.STREAM.INFO.KV_fp_<w>", pub, ownerOnly, "open the world: its settings are the bucket stream's metadata (fencepost.world.config); the bucket's handle; watch"},
	{"$KV.fp_<w>.o.>", pub, ownerOnly, "ownership records: claim, renew, release and seize are conditional writes of the record (not f.*: a forced seize first writes the id's force key, which only the operator may write)"},
	{"$KV.fp_<w>.c.>", pub, ownerOnly, "delivery cursors: the fenced commit of a drain"},
	{"$KV.fp_<w>.s.>", pub, ownerOnly, "per-id state: written in the fenced atomic batch of a commit, with the cursor (design 3.12)"},
	{"$KV.fp_<w>.barrier", pub, ownerOnly, "the read barrier of a replicated world: a write conditional on a record's revision that confirms an answer decided on a read (owner, refusals; design invariant 8 point 6)"},
	{"$KV.fp_<w>.l.>", pub, ownerOnly, "drain locks: one drain per id at a time"},
	{"$KV.fp_<w>.n.>", pub, roleWide, "node leases: one write per node and renewal period keeps all its ids (the role-wide owner.creds, bound to no node: any node's lease)"},
	{"$KV.fp_<w>.n.<node>", pub, nodeBound, "its own node lease, and no other node's: it cannot renew, retire or delete another node's lease (fencepostd retires lapsed ones)"},
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
	{"$JS.API.CONSUMER.CREATE.FP_MB_<w>", pub, ownerOnly, "drain of deep mailboxes or many ids: a consumer for that drain (AckNone, memory, one replica)"},
	{"$JS.API.CONSUMER.CREATE.FP_MB_<w>.>", pub, ownerOnly, "the same, with a consumer name and filter subject"},
	{"$JS.API.CONSUMER.INFO.FP_MB_<w>.*", pub, ownerOnly, "that consumer's state"},
	{"$JS.API.CONSUMER.DELETE.FP_MB_<w>.*", pub, ownerOnly, "delete that consumer after the drain (no consumer exists at rest)"},
	{"$JS.API.CONSUMER.MSG.NEXT.FP_MB_<w>.*", pub, ownerOnly, "pull messages from that consumer"},
	{"fp.<w>.rp.>", sub, ownerOnly, "a partitioned world's posts, republished by partition: a worker reads the partitions it serves and the ids it holds (design 3.13)"},
	{"_INBOX.>", pub, ownerOnly, "answer calls: a worker publishes each call's answer to the reply subject the call names, which is under the caller's own inbox prefix (docs/wire.md Calls); it may publish to any inbox, and subscribe to its own only"},
}

// rolePermissions are the subject permissions of role for world w and the
// user with public nkey user (and, for RoleNodeOwner, node node), as the
// user's JWT carries them.
func rolePermissions(role, w, user, node string) jwt.Permissions {
	var p jwt.Permissions
	if role == RoleOperator {
		p.Pub.Allow.Add(">")
		p.Sub.Allow.Add(">")
		return p
	}
	for _, g := range Permissions {
		if !slices.Contains(g.Roles, role) {
			continue
		}
		s := strings.NewReplacer("<w>", w, "<user>", user, "<node>", wire.EncodeID(node)).Replace(g.Subject)
		if g.Pub {
			p.Pub.Allow.Add(s)
		} else {
			p.Sub.Allow.Add(s)
		}
	}
	// Both roles have subjects on both sides: an empty allow list reads as
	// "everything allowed".
	if len(p.Pub.Allow) == 0 || len(p.Sub.Allow) == 0 {
		panic("daemon: role " + role + " without subjects")
	}
	return p
}

// Creds are one role's credentials as fencepostd --auth writes them to
// <data dir>/<role>.creds: a standard NATS credentials file (a user JWT
// and its nkey seed), the kind `fencepost --creds` and `nats --creds`
// read.
type Creds struct {
	JWT  string
	Seed []byte
}

// NATSOption is the nats.go option that authenticates with c and, when
// c's user has an inbox prefix of its own (InboxPrefix), uses it for every
// reply subject (nats.CustomInboxPrefix).
func (c Creds) NATSOption() nats.Option {
	auth := nats.UserJWTAndSeed(c.JWT, string(c.Seed))
	prefix := c.InboxPrefix()
	return func(o *nats.Options) error {
		if err := auth(o); err != nil {
			return err
		}
		if prefix == "" {
			return nil
		}
		return nats.CustomInboxPrefix(prefix)(o)
	}
}

// InboxPrefix is the inbox prefix c's user JWT confines its replies to
// ("_INBOX.<user public key>" for the producer and the owner), or "" when
// it allows nats.go's default inbox (the operator).
func (c Creds) InboxPrefix() string {
	p, _ := inbox.FromJWT(c.JWT)
	return p
}

// User is the public key of c's user.
func (c Creds) User() (string, error) {
	kp, err := nkeys.FromSeed(c.Seed)
	if err != nil {
		return "", err
	}
	return kp.PublicKey()
}

// CredsFile is where fencepostd --auth keeps role's credentials.
func CredsFile(dataDir, role string) string { return filepath.Join(dataDir, role+".creds") }

// authDir holds the operator's and the accounts' nkey seeds.
func authDir(dataDir string) string { return filepath.Join(dataDir, "auth") }

// ReadCreds reads a NATS credentials file.
func ReadCreds(path string) (Creds, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Creds{}, err
	}
	tok, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return Creds{}, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := jwt.DecodeUserClaims(tok); err != nil {
		return Creds{}, fmt.Errorf("%s: not a user JWT: %w", path, err)
	}
	kp, err := jwt.ParseDecoratedNKey(b)
	if err != nil {
		return Creds{}, fmt.Errorf("%s: %w", path, err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return Creds{}, fmt.Errorf("%s: %w", path, err)
	}
	return Creds{JWT: tok, Seed: seed}, nil
}

// writeSecret writes b to path, readable by this user only, atomically.
func writeSecret(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// keyPair reads the nkey seed at path, or makes one and writes it there.
func keyPair(path string, create func() (nkeys.KeyPair, error)) (nkeys.KeyPair, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		kp, err := nkeys.FromSeed(bytes.TrimSpace(b))
		if err != nil {
			return nil, fmt.Errorf("%s: not an nkey seed: %w", path, err)
		}
		return kp, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	kp, err := create()
	if err != nil {
		return nil, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, err
	}
	if err := writeSecret(path, append(seed, '\n')); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return kp, nil
}

// trust is fencepostd's NATS decentralized auth: an operator, the store
// account the worlds live in, the producers' and the owners' accounts
// (accounts.go), the system account, one user per role, and fencepostd's
// own user.
type trust struct {
	operator, system nkeys.KeyPair
	accounts         accountKeys
	creds            map[string]Creds
	own              Creds             // fencepostd's own connection: in memory only, no expiry
	accountJWTs      map[string]string // by account name, with the limits and the revocations of the data dir
	notes            []string          // what the start changed in the data dir, for the log
}

// loadOrCreateTrust returns the operator, the accounts and every role's
// credentials. The seeds are read from <data dir>/auth when present (so
// that a restart keeps clients working, and so that the members of a
// cluster can share them: copy the first member's auth directory to the
// others), and made there otherwise. Every start issues each role's user
// JWT again from the role's seed, in the role's account, valid for l.TTL,
// so that the creds files always carry the permissions of this version;
// the seed, and so the user, stays. The account JWTs carry l, world's
// imports and exports, and the data dir's revocations. A data dir of the
// single account is moved to the accounts (migrateToAccounts).
func loadOrCreateTrust(dataDir, world string, l Limits) (*trust, error) {
	dir := authDir(dataDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	unlock, err := lockAuth(dataDir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	var t trust
	if t.operator, err = keyPair(filepath.Join(dir, "operator.nk"), nkeys.CreateOperator); err != nil {
		return nil, err
	}
	// A data dir of the single account: the store's key and no owners'
	// account yet.
	_, errStore := os.Stat(filepath.Join(dir, storeAcct.seed))
	_, errOwners := os.Stat(filepath.Join(dir, ownerAcct.seed))
	single := errStore == nil && errors.Is(errOwners, os.ErrNotExist)
	if t.accounts, err = loadAccountKeys(dir, true); err != nil {
		return nil, err
	}
	if t.system, err = keyPair(filepath.Join(dir, "system.nk"), nkeys.CreateAccount); err != nil {
		return nil, err
	}
	rev, err := readRevocations(dataDir)
	if err != nil {
		return nil, err
	}
	if t.notes, err = migrateToAccounts(dataDir, t.accounts, rev, single); err != nil {
		return nil, fmt.Errorf("move the data dir's users to the accounts: %w", err)
	}
	t.creds = map[string]Creds{}
	for _, role := range Roles {
		path := CredsFile(dataDir, role)
		user, err := userKey(path, rev)
		if err != nil {
			return nil, err
		}
		c, err := issueUser(t.accounts[accountOf(role).name], user, role, "", world, l.Payload, l.TTL)
		if err != nil {
			return nil, err
		}
		if err := writeCreds(path, c); err != nil {
			return nil, err
		}
		t.creds[role] = c
	}
	own, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	if t.own, err = issueUser(t.accounts[storeAcct.name], own, RoleOperator, "", world, 0, 0); err != nil {
		return nil, err
	}
	if t.accountJWTs, err = signAccounts(dataDir, t.operator, t.accounts, world, l); err != nil {
		return nil, err
	}
	return &t, nil
}

// configure turns auth on in opts: the operator is trusted, and the
// accounts are served from memory. Every client then needs a user JWT
// signed by one of them (a creds file); each has the limits and
// revocations of t.accountJWTs. A nats-server config file that configures
// authentication itself is refused: the two would not combine.
func (t *trust) configure(opts *natsserver.Options) error {
	if len(opts.Users) > 0 || len(opts.Nkeys) > 0 || opts.Username != "" || opts.Authorization != "" || len(opts.TrustedOperators) > 0 || len(opts.TrustedKeys) > 0 || opts.NoAuthUser != "" || len(opts.Accounts) > 0 {
		return fmt.Errorf("%w: auth: the nats-server config file configures authentication or accounts itself; use --auth or the file's, not both", server.ErrConfig)
	}
	opPub, err := t.operator.PublicKey()
	if err != nil {
		return err
	}
	sysPub, err := t.system.PublicKey()
	if err != nil {
		return err
	}
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "fencepost"
	oc.SystemAccount = sysPub
	opJWT, err := oc.Encode(t.operator)
	if err != nil {
		return fmt.Errorf("auth: operator JWT: %w", err)
	}
	if oc, err = jwt.DecodeOperatorClaims(opJWT); err != nil {
		return err
	}
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	sysJWT, err := sc.Encode(t.operator)
	if err != nil {
		return fmt.Errorf("auth: system account JWT: %w", err)
	}
	res := &natsserver.MemAccResolver{}
	for _, a := range allAccts {
		if err := res.Store(t.accounts.pub(a), t.accountJWTs[a.name]); err != nil {
			return err
		}
	}
	if err := res.Store(sysPub, sysJWT); err != nil {
		return err
	}
	opts.TrustedOperators = []*jwt.OperatorClaims{oc}
	opts.AccountResolver = res
	opts.SystemAccount = sysPub
	return nil
}
