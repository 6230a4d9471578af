package main

import (
	"context"

	"github.com/fencepost/fencepost/ownership"
)

type ownOps struct {
	ctx context.Context
	s   *ownership.Store
}

// ownershipOp opens the world and runs fn with its ownership store.
func (e *env) ownershipOp(fn func(o ownOps) int) int {
	ctx, cancel := e.ctx()
	defer cancel()
	w, err := e.openWorld(ctx)
	if err != nil {
		return e.fail(err)
	}
	return fn(ownOps{ctx: ctx, s: w.Ownership})
}
