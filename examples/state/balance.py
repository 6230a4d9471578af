#!/usr/bin/env python3
"""A `fencepost work --state` handler in Python: a balance per account.

Each message's body is an amount ("100", "-30"); the account's balance is
kept in its state, under "balance", with the number of deposits under
"n". A withdrawal that would take the balance below zero is refused: the
script exits 1, nothing is staged, and the message is delivered again
until the world's max_deliveries, then dead-lettered.

    fencepost world add bank
    fencepost --world bank work --node w1 --all --state \
        --exec 'python3 examples/state/balance.py'
    fencepost --world bank send acct-1 100
    fencepost --world bank send acct-1 -- -30
    fencepost --world bank state acct-1     # key key=balance value=100 ...

The protocol (docs/design.md 3.12): FENCEPOST_STATE names a file with the
id's state as one JSON object (strings), as of the message before this
one; the writes go to the file FENCEPOST_STATE_WRITES as one JSON object,
a string sets a key and null deletes it. Exit status 0 commits them with
the message, exactly once.
"""
import json
import os
import sys

with open(os.environ["FENCEPOST_STATE"]) as f:
    state = json.load(f)

amount = int(sys.stdin.read().strip())
balance = int(state.get("balance", "0")) + amount
if balance < 0:
    print(f"{os.environ['FENCEPOST_ID']}: refused {amount}: balance would be {balance}", file=sys.stderr)
    sys.exit(1)

with open(os.environ["FENCEPOST_STATE_WRITES"], "w") as f:
    json.dump({"balance": str(balance), "n": str(int(state.get("n", "0")) + 1)}, f)
