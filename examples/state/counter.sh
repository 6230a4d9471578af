#!/bin/sh
# A `fencepost work --state` handler in plain sh: counts each id's
# messages and keeps the last body, in the id's state. Run it with
#
#   fencepost work --node w1 --all --state --exec 'sh examples/state/counter.sh'
#
# and read an id's state with `fencepost state ID`.
#
# The protocol (docs/design.md 3.12): the id's state as of the message
# before this one is a JSON object in the file $FENCEPOST_STATE, compact,
# keys sorted, values strings: {"count":"41","last":"hello"}. Writes go
# to the file $FENCEPOST_STATE_WRITES as one JSON object, a string to set
# a key, null to delete it. Exit 0 commits them with the message, once;
# any other exit status stages nothing and the message is delivered
# again. The body is on stdin.
set -eu
count=$(sed -n 's/.*"count":"\([0-9]*\)".*/\1/p' "$FENCEPOST_STATE")
count=$(( ${count:-0} + 1 ))
# The last body, as a JSON string: only letters, digits and a few marks
# are kept here (a real handler would use a JSON encoder).
last=$(tr -cd 'A-Za-z0-9 ._-' | cut -c1-100)
printf '{"count":"%d","last":"%s"}' "$count" "$last" > "$FENCEPOST_STATE_WRITES"
