// Package wire holds fencepost's layout in JetStream: the names of a world's
// bucket and streams, the key and subject of every id, the id codec and the
// versioned ownership record. docs/wire.md is the public form of this file;
// change both together.
package wire
