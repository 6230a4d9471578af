package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// The accounts of fencepostd --auth (docs/security.md,
// "Accounts").
//
// A NATS permission checks the subject a client publishes to, never the
// reply subject it names, and JetStream answers a request (a publish's
// acknowledgement, a direct get's stored message with its headers) on that
// reply subject, in the account of the stream: a stream of that account
// whose subjects take the reply stores the answer. So no producer or owner
// is in the account fencepost's streams live in (the store account). Each
// role's users are in an account of the role's, which reaches the store
// only through imports of the subjects the role is granted (Permissions):
// a service import for each subject it publishes to (posts, key writes,
// JetStream API requests), a stream import for what it subscribes to
// beyond its replies (republished posts, and, for owners, the push
// deliveries of a watch to their inboxes). Across a service import the
// server gives the request a reply subject of its own in the store account
// (_R_.<token>) and carries the answer back itself, so a client cannot aim
// an answer at a subject of the store, whatever reply it names. A push
// consumer delivers only where a subscription of the store account shows
// interest in that very subject, and the client accounts make that
// interest only on what they import as streams (their inboxes, the
// republished posts), which no stream of the store takes.
//
// The store account keeps the data dir's first account key (account.nk),
// so its streams stay where they are; the operator role and fencepostd's
// own connection are its users. The producers' and the owners' accounts
// are new keys (producers.nk, owners.nk), each with its own connection
// limit.

// acct is one account of fencepostd --auth.
type acct struct {
	name  string   // the account JWT's name
	seed  string   // its nkey seed, in the auth directory
	file  string   // the account JWT fencepostd signed last, in the auth directory
	roles []string // the roles whose users it holds
}

var (
	storeAcct    = acct{"FENCEPOST", "account.nk", "account.jwt", []string{RoleOperator}}
	producerAcct = acct{"FENCEPOST_PRODUCERS", "producers.nk", "producers.jwt", []string{RoleProducer}}
	ownerAcct    = acct{"FENCEPOST_OWNERS", "owners.nk", "owners.jwt", []string{RoleOwner, RoleNodeOwner}}
	// clientAccts import from the store account.
	clientAccts = []acct{producerAcct, ownerAcct}
	allAccts    = []acct{storeAcct, producerAcct, ownerAcct}
)

// accountOf is the account of role's users.
func accountOf(role string) acct {
	for _, a := range clientAccts {
		if slices.Contains(a.roles, role) {
			return a
		}
	}
	return storeAcct
}

// imported is one subject of the store account that a client account
// reaches.
type imported struct {
	subject string
	stream  bool   // a stream import (deliveries to subscribe to); else a service import (requests and publishes)
	from    string // the store's subject, when not subject: the consumer gate's (gate.go), with the requester shared
}

// exported is the store's subject of im.
func (im imported) exported() string {
	if im.from != "" {
		return im.from
	}
	return im.subject
}

// jsAccountInfo is JetStream's account information request.
const jsAccountInfo = "$JS.API.INFO"

// inboxDeliveries is the stream import that carries push deliveries (a
// watch's ordered consumer delivers to the watcher's inbox) from the store
// account to the owners'; each user may subscribe to its own prefix only.
const inboxDeliveries = "_INBOX.>"

// accountImports lists what account a reaches of the store account for
// world w: the subjects its roles are granted in Permissions (a node
// owner's own node lease is within the role-wide owner's n.>), none
// within another of the list (the server would route a message matching
// two service imports of an account twice).
func accountImports(a acct, w string) []imported {
	var out []imported
	add := func(s string, stream bool) {
		for _, x := range out {
			if x.stream == stream && natsserver.SubjectMatchesFilter(s, x.subject) {
				return
			}
		}
		out = slices.DeleteFunc(out, func(x imported) bool {
			return x.stream == stream && natsserver.SubjectMatchesFilter(x.subject, s)
		})
		im := imported{subject: s, stream: stream}
		if gs, ok := gateSubject(w, s); ok && !stream {
			im.from = gs
		}
		out = append(out, im)
	}
	// The server answers every JetStream request of an account without
	// JetStream "not enabled" itself unless the account imports
	// $JS.API.INFO from another: imported, and no role may publish to it.
	add(jsAccountInfo, false)
	r := strings.NewReplacer("<w>", w, "<node>", "*")
	for _, g := range Permissions {
		if !slices.ContainsFunc(g.Roles, func(role string) bool { return slices.Contains(a.roles, role) }) {
			continue
		}
		s := r.Replace(g.Subject)
		switch {
		case g.Pub:
			add(storeImport(s), false)
		case strings.HasPrefix(g.Subject, "_INBOX."):
			// Replies come back across the service import by
			// themselves; push deliveries need the stream import, and
			// only owners watch.
			if slices.Contains(a.roles, RoleOwner) {
				add(inboxDeliveries, true)
			}
		default:
			add(s, true)
		}
	}
	slices.SortFunc(out, func(x, y imported) int { return strings.Compare(x.subject, y.subject) })
	return out
}

// storeImport is the service import that carries publishes to subject: the
// subject itself, but a wildcard in place of the last token of a literal
// subject that a stream of the store takes (the world's barrier key). The
// server passes an answer delivered to a client account on a subject of a
// literal service import on to the exporter, on that subject: an answer
// aimed at $KV.fp_<w>.barrier, imported as such, was stored in the bucket
// (TestAttack_ReplySubjectsWriteNothing). Through a wildcard import it
// goes on to the answer's own reply subject in the store account
// (_R_.<token>), which takes it nowhere. The user's permission stays the
// literal subject.
func storeImport(subject string) string {
	if strings.ContainsAny(subject, "*>") || !(strings.HasPrefix(subject, "$KV.") || strings.HasPrefix(subject, "fp.")) {
		return subject
	}
	return subject[:strings.LastIndexByte(subject, '.')] + ".*"
}

// Response thresholds of the store's service exports: how long the server
// keeps the way back of a request whose answers may come in several
// messages, after the last one.
const (
	pullRespThreshold   = 2 * time.Minute // a pull request: messages, then heartbeats, for its expiry
	directRespThreshold = 5 * time.Second // a batched direct get: its messages and the end of batch at once
)

// responseOf is how the store answers a request on subject: one message
// (a publish's acknowledgement, an API answer, a direct get of one
// subject), or several (a pull request's messages and heartbeats, a
// direct get of a batch).
func responseOf(subject string) (jwt.ResponseType, time.Duration) {
	switch {
	case strings.HasPrefix(subject, "$JS.API.CONSUMER.MSG.NEXT."):
		return jwt.ResponseTypeStream, pullRespThreshold
	case strings.HasPrefix(subject, "$JS.API.DIRECT.GET.") && strings.Count(subject, ".") == 4:
		return jwt.ResponseTypeStream, directRespThreshold
	}
	return jwt.ResponseTypeSingleton, 0
}

// storeExports are the store account's exports for world w: everything a
// client account imports, none within another (the server refuses an
// account JWT whose exports overlap; an import within an export is
// served by it).
func storeExports(w string) jwt.Exports {
	var all []imported
	for _, a := range clientAccts {
		for _, im := range accountImports(a, w) {
			if slices.ContainsFunc(all, func(x imported) bool {
				return x.stream == im.stream && natsserver.SubjectMatchesFilter(im.exported(), x.exported())
			}) {
				continue
			}
			all = slices.DeleteFunc(all, func(x imported) bool {
				return x.stream == im.stream && natsserver.SubjectMatchesFilter(x.exported(), im.exported())
			})
			all = append(all, im)
		}
	}
	slices.SortFunc(all, func(x, y imported) int { return strings.Compare(x.exported(), y.exported()) })
	var ex jwt.Exports
	for _, im := range all {
		e := &jwt.Export{Name: im.exported(), Subject: jwt.Subject(im.exported()), Type: jwt.Stream}
		if !im.stream {
			e.Type = jwt.Service
			rt, th := responseOf(im.subject)
			e.ResponseType, e.ResponseThreshold = rt, th
		}
		ex.Add(e)
	}
	return ex
}

// accountClaimsOf are the claims of account a (public key pub) for world
// w: its limits, imports or exports, and revocations.
func accountClaimsOf(a acct, pub, storePub, w string, l Limits, rev revocations) *jwt.AccountClaims {
	ac := jwt.NewAccountClaims(pub)
	ac.Name = a.name
	ac.Description = worldTag + w
	ac.Limits.Conn = l.Conns
	if a.name == storeAcct.name {
		ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: l.Memory, DiskStorage: l.Store, Streams: l.Streams, Consumer: l.Consumers}
		ac.Exports = storeExports(w)
	} else {
		// No JetStream of its own: every JetStream request goes to the
		// store through an import.
		ac.Limits.JetStreamLimits = jwt.JetStreamLimits{}
		for _, im := range accountImports(a, w) {
			i := &jwt.Import{Name: im.subject, Account: storePub, Subject: jwt.Subject(im.exported()), Type: jwt.Service}
			if im.stream {
				i.Type = jwt.Stream
			}
			if im.from != "" {
				// The consumer gate: the requester's identity goes with
				// the request (Nats-Request-Info, set by the server).
				i.LocalSubject, i.Share = jwt.RenamingSubject(im.subject), true
			}
			if a.name == ownerAcct.name && attributed(w, im.subject) {
				// Record and state writes: the writer's identity goes
				// with the write, for the auditor (writers.go).
				i.Share = true
			}
			ac.Imports.Add(i)
		}
	}
	for user, r := range rev {
		if user == jwt.All && a.name != storeAcct.name {
			continue // the store's users before the accounts
		}
		ac.RevokeAt(user, time.Unix(r.At, 0))
	}
	return ac
}

// worldTag begins the description of fencepostd's accounts: the world
// their imports reach.
const worldTag = "fencepost world "

// accountsWorld is the world the accounts of a data dir reach, from the
// store account's JWT.
func accountsWorld(dataDir string) (string, error) {
	ac, err := readAccountJWT(dataDir, storeAcct)
	if err != nil {
		return "", err
	}
	w, ok := strings.CutPrefix(ac.Description, worldTag)
	if !ok {
		return "", fmt.Errorf("%s: not an account of fencepostd --auth with accounts", filepath.Join(authDir(dataDir), storeAcct.file))
	}
	return w, nil
}

func readAccountJWT(dataDir string, a acct) (*jwt.AccountClaims, error) {
	path := filepath.Join(authDir(dataDir), a.file)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoAuth, err)
	}
	ac, err := jwt.DecodeAccountClaims(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ac, nil
}

// accountPubs are the public keys of t's accounts.
func (t *trust) accountPubs() []string {
	var out []string
	for _, a := range allAccts {
		out = append(out, t.accounts.pub(a))
	}
	return out
}

// accountKeys are the three accounts' key pairs, by account name.
type accountKeys map[string]nkeys.KeyPair

func (k accountKeys) pub(a acct) string {
	p, _ := k[a.name].PublicKey()
	return p
}

// signAccounts signs every account's JWT for world w with the limits l and
// the data dir's revocations, writes each to its file and returns them by
// account name.
func signAccounts(dataDir string, operator nkeys.KeyPair, keys accountKeys, w string, l Limits) (map[string]string, error) {
	rev, err := readRevocations(dataDir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, a := range allAccts {
		ac := accountClaimsOf(a, keys.pub(a), keys.pub(storeAcct), w, l, rev)
		routeAnswers(ac, a, keys)
		vr := jwt.CreateValidationResults()
		ac.Validate(vr)
		if errs := vr.Errors(); len(errs) > 0 {
			return nil, fmt.Errorf("auth: account JWT %s: %w", a.name, errors.Join(errs...))
		}
		tok, err := ac.Encode(operator)
		if err != nil {
			return nil, fmt.Errorf("auth: account JWT %s: %w", a.name, err)
		}
		if err := writeSecret(filepath.Join(authDir(dataDir), a.file), []byte(tok+"\n")); err != nil {
			return nil, err
		}
		out[a.name] = tok
	}
	return out, nil
}

// resignAccounts signs the data dir's account JWTs again with its
// revocations, keeping everything else they say (creds revoke).
func resignAccounts(dataDir string, operator nkeys.KeyPair) error {
	rev, err := readRevocations(dataDir)
	if err != nil {
		return err
	}
	for _, a := range allAccts {
		ac, err := readAccountJWT(dataDir, a)
		if err != nil {
			return err
		}
		ac.Revocations = nil
		for user, r := range rev {
			if user == jwt.All && a.name != storeAcct.name {
				continue
			}
			ac.RevokeAt(user, time.Unix(r.At, 0))
		}
		tok, err := ac.Encode(operator)
		if err != nil {
			return fmt.Errorf("auth: account JWT %s: %w", a.name, err)
		}
		if err := writeSecret(filepath.Join(authDir(dataDir), a.file), []byte(tok+"\n")); err != nil {
			return err
		}
	}
	return nil
}

// migrateToAccounts moves a data dir of the single account (every user
// signed by the store account, the one the streams live in) to the
// accounts. Every user the store signed until now is revoked (a revocation
// of all of them, "*", at this second), and the node and producer files of
// the data dir are issued again in their own accounts, with the same key
// (so the same inbox prefix), expiry and payload; copies of them elsewhere
// are refused until replaced. It waits for the next second, so that the
// store's users issued after it (the operator's file, fencepostd's own)
// are not revoked with the rest. It returns what it did, for the log.
func migrateToAccounts(dataDir string, keys accountKeys, rev revocations, single bool) ([]string, error) {
	var notes []string
	if _, ok := rev[jwt.All]; single && !ok {
		now := time.Now()
		rev[jwt.All] = revoked{Who: "every user issued before the producers' and owners' accounts", At: now.Unix()}
		if err := writeRevocations(dataDir, rev); err != nil {
			return nil, err
		}
		time.Sleep(time.Until(now.Truncate(time.Second).Add(time.Second + 10*time.Millisecond)))
		notes = append(notes, "the producers and owners are now users of accounts of their own; every user issued before is refused: role files are issued again at each start, node and producer files below")
	}
	files, err := extraCredsFiles(dataDir)
	if err != nil {
		return nil, err
	}
	storePub := keys.pub(storeAcct)
	for _, path := range files {
		c, err := ReadCreds(path)
		if err != nil {
			return nil, err
		}
		uc, err := jwt.DecodeUserClaims(c.JWT)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if uc.Issuer != storePub {
			continue // issued in its account already
		}
		if _, gone := rev[uc.Subject]; gone {
			continue // revoked: stays revoked
		}
		if uc.Expires != 0 && time.Unix(uc.Expires, 0).Before(time.Now()) {
			continue
		}
		is, err := describe(path, c.JWT, rev)
		if err != nil {
			return nil, err
		}
		w := worldOf(uc)
		role, name := RoleProducer, is.Name
		if is.Node != "" {
			role, name = RoleNodeOwner, is.Node
		}
		kp, err := nkeys.FromSeed(c.Seed)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var ttl time.Duration
		if uc.Expires != 0 {
			ttl = time.Until(time.Unix(uc.Expires, 0))
		}
		nc, err := issueUser(keys[accountOf(role).name], kp, role, name, w, uc.Limits.Payload, ttl)
		if err != nil {
			return nil, err
		}
		if err := writeCreds(path, nc); err != nil {
			return nil, err
		}
		notes = append(notes, fmt.Sprintf("issued again in the %s account (same user, same expiry): %s; replace its copies", accountOf(role).name, path))
	}
	return notes, nil
}

// worldOf is the world a user JWT's permissions cover (its mailbox
// subjects), or the default world.
func worldOf(uc *jwt.UserClaims) string {
	for _, s := range uc.Pub.Allow {
		if rest, ok := strings.CutPrefix(s, "fp."); ok {
			if w, ok := strings.CutSuffix(rest, ".mb.*"); ok {
				return w
			}
		}
	}
	return Defaults.World
}

// extraCredsFiles are the data dir's node and producer credentials files.
func extraCredsFiles(dataDir string) ([]string, error) {
	nodes, err := filepath.Glob(filepath.Join(dataDir, "nodes", "*.creds"))
	if err != nil {
		return nil, err
	}
	producers, err := filepath.Glob(filepath.Join(dataDir, "producers", "*.creds"))
	if err != nil {
		return nil, err
	}
	slices.Sort(nodes)
	slices.Sort(producers)
	return append(nodes, producers...), nil
}

// loadAccountKeys reads the accounts' seeds from the auth directory, or,
// with create, makes the missing ones.
func loadAccountKeys(dir string, create bool) (accountKeys, error) {
	keys := accountKeys{}
	for _, a := range allAccts {
		path := filepath.Join(dir, a.seed)
		if !create {
			if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("%w: %s has no %s; start fencepostd --auth (this version) on it once first", ErrNoAuth, dir, a.seed)
			}
		}
		kp, err := keyPair(path, nkeys.CreateAccount)
		if err != nil {
			return nil, err
		}
		keys[a.name] = kp
	}
	return keys, nil
}
