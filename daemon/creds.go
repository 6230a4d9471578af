package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/fencepost/fencepost/internal/wire"
)

// Credentials of fencepostd --auth beyond the three role files: one owner
// user per node, with expiry, limits and revocation (docs/security.md,
// "One identity per node", "Limits and lifetimes"). Everything is kept in
// the data dir: the account's seed signs users, the operator's seed signs
// the account JWT that carries the revocations.

// DefaultCredsTTL is how long the user JWTs fencepostd issues are valid
// (creds_ttl).
const DefaultCredsTTL = 90 * 24 * time.Hour

// ErrNoAuth: the data dir has no keys of fencepostd --auth yet.
var ErrNoAuth = errors.New("fencepostd: no --auth keys in the data dir")

// ErrUnknownNode: no credentials were issued for that node (or named
// producer).
var ErrUnknownNode = errors.New("fencepostd: no credentials of that node")

// NodeCredsFile is where `fencepostd creds add --role owner --node N`
// writes node N's credentials: <data dir>/nodes/<encoded node>.creds.
func NodeCredsFile(dataDir, node string) string {
	return filepath.Join(dataDir, "nodes", wire.EncodeID(node)+".creds")
}

// ProducerCredsFile is where `fencepostd creds add --role producer --name
// P` writes the credentials of producer P, a user of its own:
// <data dir>/producers/<encoded name>.creds.
func ProducerCredsFile(dataDir, name string) string {
	return filepath.Join(dataDir, "producers", wire.EncodeID(name)+".creds")
}

// Issued describes one user's credentials.
type Issued struct {
	Role    string    `json:"role"`           // producer, owner or operator
	Node    string    `json:"node,omitempty"` // the node an owner is bound to
	Name    string    `json:"name,omitempty"` // a producer's own name
	User    string    `json:"user"`           // public nkey
	File    string    `json:"file"`
	Issued  time.Time `json:"issued"`
	Expires time.Time `json:"expires,omitzero"` // zero: never
	Revoked time.Time `json:"revoked,omitzero"` // zero: not revoked
}

// tagRole is the tag of a user JWT naming its role ("role:<role>"); a
// node owner's node is in its file name (NodeCredsFile).
const tagRole = "role:"

// roleSubs is the most subscriptions one connection of each role may have
// (the user JWT's subs limit): a producer needs its reply subscription and
// few more; an owner a watch and a consumer per drain running.
var roleSubs = map[string]int64{RoleProducer: 100, RoleOwner: 10_000, RoleNodeOwner: 10_000, RoleOperator: jwt.NoLimit}

// Limits are the limits fencepostd --auth puts in the JWTs it issues
// (Config's auth_max_* and creds_ttl).
type Limits struct {
	Conns     int64         // connections of the account, all roles together
	Streams   int64         // JetStream streams of the account
	Consumers int64         // JetStream consumers of the account
	Store     int64         // JetStream file storage of the store account, bytes (-1: none)
	Memory    int64         // JetStream memory storage of the store account, bytes (-1: none)
	Payload   int64         // largest message a producer or owner may publish, bytes
	TTL       time.Duration // lifetime of the user JWTs issued at start
}

// issueUser signs a user JWT for kp with role's permissions on world w,
// bound to node for RoleNodeOwner (for a producer, node is its name, in
// the JWT's name only), valid for ttl (0: no expiry).
func issueUser(account, kp nkeys.KeyPair, role, node, w string, payload int64, ttl time.Duration) (Creds, error) {
	pub, err := kp.PublicKey()
	if err != nil {
		return Creds{}, err
	}
	uc := jwt.NewUserClaims(pub)
	uc.Name = "fp-" + role
	uc.Tags.Add(tagRole + role)
	switch {
	case role == RoleNodeOwner:
		uc.Name = "fp-owner@" + node
	case node != "":
		uc.Name = "fp-" + role + "@" + node // a named producer
	}
	uc.Permissions = rolePermissions(role, w, pub, node)
	uc.Limits.Subs = roleSubs[role]
	if role != RoleOperator {
		uc.Limits.Payload = payload
	}
	if ttl > 0 {
		uc.Expires = time.Now().Add(ttl).Unix()
	}
	tok, err := uc.Encode(account)
	if err != nil {
		return Creds{}, fmt.Errorf("auth: user JWT of %s: %w", uc.Name, err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return Creds{}, err
	}
	return Creds{JWT: tok, Seed: seed}, nil
}

// writeCreds writes c to path as a NATS credentials file (mode 0600).
func writeCreds(path string, c Creds) error {
	file, err := jwt.FormatUserConfig(c.JWT, c.Seed)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := writeSecret(path, file); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// authKeys are the data dir's signing keys, read by the creds commands
// while fencepostd may be running (never made by them).
type authKeys struct {
	dir              string
	operator, system nkeys.KeyPair
	accounts         accountKeys
}

func readAuthKeys(dataDir string) (*authKeys, error) {
	k := &authKeys{dir: authDir(dataDir)}
	for name, p := range map[string]*nkeys.KeyPair{"operator.nk": &k.operator, "system.nk": &k.system} {
		b, err := os.ReadFile(filepath.Join(k.dir, name))
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s has no %s; start fencepostd --auth on it once first", ErrNoAuth, dataDir, name)
		}
		if err != nil {
			return nil, err
		}
		if *p, err = nkeys.FromSeed([]byte(strings.TrimSpace(string(b)))); err != nil {
			return nil, fmt.Errorf("%s: not an nkey seed: %w", name, err)
		}
	}
	var err error
	if k.accounts, err = loadAccountKeys(k.dir, false); err != nil {
		return nil, err
	}
	return k, nil
}

// revocations are the revoked users, kept in <data dir>/auth/revocations.json
// and carried by every account JWT fencepostd signs.
type revocations map[string]revoked

type revoked struct {
	Who string `json:"who,omitempty"` // "node N" or "producer P"
	At  int64  `json:"at"`            // unix seconds: JWTs issued at or before it are refused
}

func revocationsFile(dataDir string) string {
	return filepath.Join(authDir(dataDir), "revocations.json")
}

func readRevocations(dataDir string) (revocations, error) {
	b, err := os.ReadFile(revocationsFile(dataDir))
	if errors.Is(err, os.ErrNotExist) {
		return revocations{}, nil
	}
	if err != nil {
		return nil, err
	}
	r := revocations{}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", revocationsFile(dataDir), err)
	}
	return r, nil
}

func writeRevocations(dataDir string, rev revocations) error {
	b, err := json.MarshalIndent(rev, "", "  ")
	if err != nil {
		return err
	}
	return writeSecret(revocationsFile(dataDir), append(b, '\n'))
}

// IssueRequest says whose credentials IssueCreds writes.
type IssueRequest struct {
	Role    string        // RoleProducer, RoleOwner or RoleOperator
	Node    string        // with RoleOwner: bind the owner to this node
	Name    string        // with RoleProducer: a producer of its own, with this name
	World   string        // the world the permissions cover (default "default")
	TTL     time.Duration // lifetime (0: DefaultCredsTTL; negative: no expiry)
	Payload int64         // largest publish, bytes (0: 1 MiB)
}

// IssueCreds writes credentials to the data dir of a fencepostd --auth
// (running or not): the role's file (CredsFile), or with a node, that
// node's (NodeCredsFile), or with a producer's name, that producer's
// (ProducerCredsFile). A user keeps its key when it is issued again
// (rotation: a client reading the file on reconnect carries on), unless
// its key was revoked: then it gets a new one.
func IssueCreds(dataDir string, req IssueRequest) (Issued, error) {
	role, path := req.Role, CredsFile(dataDir, req.Role)
	switch {
	case !slices.Contains(Roles, role):
		return Issued{}, fmt.Errorf("fencepostd: role %q is none of %s", role, strings.Join(Roles, ", "))
	case req.Node != "" && role != RoleOwner:
		return Issued{}, fmt.Errorf("fencepostd: --node binds an owner to its node; the %s role has no node", role)
	case req.Name != "" && role != RoleProducer:
		return Issued{}, fmt.Errorf("fencepostd: --name gives a producer a user of its own; the %s role has none", role)
	case req.Node != "":
		if err := wire.ValidateNode(req.Node); err != nil {
			return Issued{}, err
		}
		role, path = RoleNodeOwner, NodeCredsFile(dataDir, req.Node)
	case req.Name != "":
		if err := wire.ValidateNode(req.Name); err != nil {
			return Issued{}, fmt.Errorf("producer name: %w", err)
		}
		path = ProducerCredsFile(dataDir, req.Name)
	}
	if req.World == "" {
		req.World = Defaults.World
	}
	if err := wire.ValidateWorld(req.World); err != nil {
		return Issued{}, err
	}
	ttl := req.TTL
	if ttl == 0 {
		ttl = DefaultCredsTTL
	}
	if req.Payload == 0 {
		req.Payload = defaultPayload
	}
	unlock, err := lockAuth(dataDir)
	if err != nil {
		return Issued{}, err
	}
	defer unlock()
	keys, err := readAuthKeys(dataDir)
	if err != nil {
		return Issued{}, err
	}
	w, err := accountsWorld(dataDir)
	if err != nil {
		return Issued{}, err
	}
	if role != RoleOperator && w != req.World {
		return Issued{}, fmt.Errorf("fencepostd: the accounts of %s reach world %q (fencepostd --world at its last start), not %q; start fencepostd --auth --world %s to serve that one", dataDir, w, req.World, req.World)
	}
	rev, err := readRevocations(dataDir)
	if err != nil {
		return Issued{}, err
	}
	kp, err := userKey(path, rev)
	if err != nil {
		return Issued{}, err
	}
	c, err := issueUser(keys.accounts[accountOf(role).name], kp, role, req.Node+req.Name, req.World, req.Payload, max(ttl, 0))
	if err != nil {
		return Issued{}, err
	}
	if err := writeCreds(path, c); err != nil {
		return Issued{}, err
	}
	return describe(path, c.JWT, rev)
}

// defaultPayload is auth_max_payload's default: nats-server's max_payload,
// which a world's default max_body and max_headers add up to.
const defaultPayload = 1 << 20

// userKey is the key of the user whose credentials are at path, or a new
// one when there are none or its key was revoked.
func userKey(path string, rev revocations) (nkeys.KeyPair, error) {
	old, err := ReadCreds(path)
	if errors.Is(err, os.ErrNotExist) {
		return nkeys.CreateUser()
	}
	if err != nil {
		return nil, fmt.Errorf("%w (move it away to have a new one written)", err)
	}
	kp, err := nkeys.FromSeed(old.Seed)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	if _, gone := rev[pub]; gone {
		return nkeys.CreateUser()
	}
	return kp, nil
}

// describe reads what the user JWT says.
func describe(path, tok string, rev revocations) (Issued, error) {
	uc, err := jwt.DecodeUserClaims(tok)
	if err != nil {
		return Issued{}, fmt.Errorf("%s: %w", path, err)
	}
	is := Issued{User: uc.Subject, File: path, Issued: time.Unix(uc.IssuedAt, 0).UTC()}
	if uc.Expires != 0 {
		is.Expires = time.Unix(uc.Expires, 0).UTC()
	}
	for _, t := range uc.Tags {
		switch {
		case strings.HasPrefix(t, tagRole):
			is.Role = strings.TrimPrefix(t, tagRole)
		}
	}
	if dir := filepath.Base(filepath.Dir(path)); dir == "nodes" || dir == "producers" {
		name, err := wire.DecodeID(strings.TrimSuffix(filepath.Base(path), ".creds"))
		if err != nil {
			return Issued{}, fmt.Errorf("%s: the file name is not an encoded name: %w", path, err)
		}
		if is.Role == RoleNodeOwner {
			is.Role, is.Node = RoleOwner, name
		} else {
			is.Name = name
		}
	}
	if r, ok := rev[uc.Subject]; ok && r.At >= uc.IssuedAt {
		is.Revoked = time.Unix(r.At, 0).UTC()
	}
	return is, nil
}

// ListCreds describes every credentials file of the data dir: the roles'
// and the nodes', revoked ones included.
func ListCreds(dataDir string) ([]Issued, error) {
	rev, err := readRevocations(dataDir)
	if err != nil {
		return nil, err
	}
	paths := []string{}
	for _, role := range Roles {
		paths = append(paths, CredsFile(dataDir, role))
	}
	extra, err := extraCredsFiles(dataDir)
	if err != nil {
		return nil, err
	}
	var out []Issued
	for _, p := range append(paths, extra...) {
		c, err := ReadCreds(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		is, err := describe(p, c.JWT, rev)
		if err != nil {
			return nil, err
		}
		out = append(out, is)
	}
	return out, nil
}

// RevokeNode revokes the credentials of node: its user is added to the
// data dir's revocations, and the account JWTs are signed again with them
// (auth/*.jwt). A running server learns it from PushAccount; a server
// started on the data dir later reads it at start. The node's file stays,
// listed as revoked; issuing the node again gives it a new key.
func RevokeNode(dataDir, node string) (Issued, error) {
	if err := wire.ValidateNode(node); err != nil {
		return Issued{}, err
	}
	return revoke(dataDir, NodeCredsFile(dataDir, node), "node", node)
}

// RevokeProducer revokes the credentials of the producer named name
// (IssueRequest.Name), as RevokeNode does a node's.
func RevokeProducer(dataDir, name string) (Issued, error) {
	if err := wire.ValidateNode(name); err != nil {
		return Issued{}, fmt.Errorf("producer name: %w", err)
	}
	return revoke(dataDir, ProducerCredsFile(dataDir, name), "producer", name)
}

// revoke revokes the user whose credentials are at path.
func revoke(dataDir, path, what, name string) (Issued, error) {
	unlock, err := lockAuth(dataDir)
	if err != nil {
		return Issued{}, err
	}
	defer unlock()
	keys, err := readAuthKeys(dataDir)
	if err != nil {
		return Issued{}, err
	}
	c, err := ReadCreds(path)
	if errors.Is(err, os.ErrNotExist) {
		return Issued{}, fmt.Errorf("%w: %s %q (%s does not exist)", ErrUnknownNode, what, name, path)
	}
	if err != nil {
		return Issued{}, err
	}
	user, err := c.User()
	if err != nil {
		return Issued{}, err
	}
	rev, err := readRevocations(dataDir)
	if err != nil {
		return Issued{}, err
	}
	rev[user] = revoked{Who: what + " " + name, At: time.Now().Unix()}
	if err := writeRevocations(dataDir, rev); err != nil {
		return Issued{}, err
	}
	if err := resignAccounts(dataDir, keys.operator); err != nil {
		return Issued{}, err
	}
	return describe(path, c.JWT, rev)
}

// PushAccount sends the data dir's account JWTs (auth/*.jwt) to the
// running server at url, as a user of the system account signed on the
// spot, and waits for the server's answers: the server applies them at
// once, closing the connections of users they revoke. In a cluster every
// member receives them. opts are added to the connection's (TLS, say).
func PushAccount(ctx context.Context, url, dataDir string, opts ...nats.Option) error {
	keys, err := readAuthKeys(dataDir)
	if err != nil {
		return err
	}
	user, err := nkeys.CreateUser()
	if err != nil {
		return err
	}
	userPub, _ := user.PublicKey()
	uc := jwt.NewUserClaims(userPub)
	uc.Name = "fp-creds-push"
	uc.Expires = time.Now().Add(time.Minute).Unix()
	ujwt, err := uc.Encode(keys.system)
	if err != nil {
		return err
	}
	seed, _ := user.Seed()
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("fencepostd creds"), nats.UserJWTAndSeed(ujwt, string(seed))}, opts...)...)
	if err != nil {
		return fmt.Errorf("connect to %s as the system account: %w", url, err)
	}
	defer nc.Close()
	for _, a := range allAccts {
		ac, err := readAccountJWT(dataDir, a)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(authDir(dataDir), a.file))
		if err != nil {
			return err
		}
		if err := pushOne(ctx, nc, url, ac.Subject, strings.TrimSpace(string(b))); err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
	}
	return nil
}

// pushOne sends one account JWT and reads the server's answer.
func pushOne(ctx context.Context, nc *nats.Conn, url, accPub, tok string) error {
	m, err := nc.RequestWithContext(ctx, fmt.Sprintf("$SYS.REQ.ACCOUNT.%s.CLAIMS.UPDATE", accPub), []byte(tok))
	if err != nil {
		return fmt.Errorf("push the account JWT to %s: %w", url, err)
	}
	var resp struct {
		Data *struct {
			Message string `json:"message"`
		} `json:"data"`
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return fmt.Errorf("push the account JWT: answer %q: %w", m.Data, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("push the account JWT: the server refused it: %s", resp.Error.Description)
	}
	if resp.Data == nil || resp.Data.Message != "jwt updated" {
		return fmt.Errorf("push the account JWT: unexpected answer %s", m.Data)
	}
	return nil
}
