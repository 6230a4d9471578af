// Package inbox names the private reply subjects of fencepostd --auth's
// users: each user's replies (publish acknowledgements, JetStream API
// answers, consumer deliveries) arrive under an inbox prefix of its own, the
// only inbox subjects its permissions let it subscribe to, so that no user
// reads another's replies (docs/security.md, "Private inboxes").
package inbox

import (
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/jwt/v2"
)

// Default is nats.go's inbox prefix, without its trailing dot.
const Default = "_INBOX"

// ForUser is the inbox prefix fencepostd --auth gives the user with public
// nkey user: "_INBOX.<user>". The user may subscribe to ForUser(user)+".>"
// and to no other inbox.
func ForUser(user string) string { return Default + "." + user }

// FromJWT is the inbox prefix that a user JWT confines the user's
// subscriptions to: the P of the one subscribe permission "P.>" whose P
// starts with "_INBOX", when the JWT does not also allow "_INBOX.>" (or
// everything). It is "" when the JWT leaves nats.go's default inbox
// usable, so that a client may keep the default.
func FromJWT(userJWT string) (string, error) {
	uc, err := jwt.DecodeUserClaims(userJWT)
	if err != nil {
		return "", fmt.Errorf("inbox: not a user JWT: %w", err)
	}
	var found []string
	for _, s := range uc.Sub.Allow {
		switch {
		case s == ">" || s == Default+".>":
			return "", nil
		case strings.HasPrefix(s, Default) && strings.HasSuffix(s, ".>"):
			p := strings.TrimSuffix(s, ".>")
			if !strings.ContainsAny(p, "*>") {
				found = append(found, p)
			}
		}
	}
	if len(uc.Sub.Allow) == 0 || len(found) != 1 {
		return "", nil
	}
	return found[0], nil
}

// FromCredsFile is FromJWT of the user JWT in the NATS credentials file
// at path: the inbox every connection made with that file must use.
func FromCredsFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("credentials: %w", err)
	}
	tok, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return "", fmt.Errorf("credentials %s: %w", path, err)
	}
	prefix, err := FromJWT(tok)
	if err != nil {
		return "", fmt.Errorf("credentials %s: %w", path, err)
	}
	return prefix, nil
}
