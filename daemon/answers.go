package daemon

import "github.com/nats-io/jwt/v2"

// answerSubject is where an owner publishes the answers to calls: the
// reply subject a call names, under the caller's own inbox prefix
// (docs/wire.md "Calls"; Permissions: owners publish to _INBOX.>).
const answerSubject = "_INBOX.>"

// routeAnswers carries an owner's answer to a call to the caller's
// account, whichever it is. A caller subscribes to a subject under its own
// inbox prefix (each user may subscribe to its own prefix only), in its
// account: the producers', the owners' or the store's (the operator).
//
//   - Owners: their own account delivers it (an owner calling another
//     id's holder).
//   - Producers: the owners' account imports _INBOX.> as a service from
//     the producers' account, which exports it: the answer reaches the
//     producer's subscription there. (Through the store it would not: the
//     server does not pass a message that came in by a service import on
//     to a stream import, so the store cannot hand it on to the producers'
//     stream import of their inboxes.)
//   - The operator: the producers' account imports _INBOX.> as a service
//     from the store (whose export of it Permissions' row makes), so the
//     answer goes on from there to the store's subscriptions.
//
// The server passes replies to requests (a publish's acknowledgement, an
// API answer) to the requester by their own response imports and not
// along these service imports: only what an owner publishes to an inbox
// itself travels them. No client publishes there but owners: no other
// role may publish to _INBOX.>.
func routeAnswers(ac *jwt.AccountClaims, a acct, keys accountKeys) {
	switch a.name {
	case ownerAcct.name:
		for _, im := range ac.Imports {
			if im.Type == jwt.Service && string(im.Subject) == answerSubject {
				im.Account = keys.pub(producerAcct)
			}
		}
	case producerAcct.name:
		ac.Exports.Add(&jwt.Export{Name: answerSubject, Subject: answerSubject, Type: jwt.Service})
		ac.Imports.Add(&jwt.Import{Name: answerSubject, Account: keys.pub(storeAcct), Subject: answerSubject, Type: jwt.Service})
	}
}
