package bench

import (
	"io"
	"sync"
)

// lineWriter is an owner or member process's report on stdout: each line
// is written before its write returns (the parent must know of a delivery
// before it is committed or acknowledged), and the lines of handlers that
// report at the same time go out together in one write, a group commit.
// One write per line cost each delivery a system call in the owner and a
// read in the parent, which raw JetStream's consumers, goroutines of the
// bench's own process, do not pay. Every line of a process goes through
// one lineWriter, so no line is ever split by another (a pipe keeps only
// writes up to PIPE_BUF whole).
type lineWriter struct {
	w io.Writer

	mu      sync.Mutex
	written *sync.Cond
	buf     []byte // the lines of batch next, not yet written
	spare   []byte
	next    uint64 // the batch lines now go into
	done    uint64 // batches written: 0..done-1
	writing bool
	err     error // the first write's failure: every later write fails
}

func newLineWriter(w io.Writer) *lineWriter {
	lw := &lineWriter{w: w}
	lw.written = sync.NewCond(&lw.mu)
	return lw
}

// write writes line (with its newline) and returns when it was written,
// in one write with the lines of every call that came while the writer
// was busy.
func (lw *lineWriter) write(line []byte) error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.err != nil {
		return lw.err
	}
	mine := lw.next
	lw.buf = append(lw.buf, line...)
	for lw.done <= mine {
		if lw.writing {
			lw.written.Wait()
			continue
		}
		// Nobody writes: every batch before next is written, and this
		// call's batch is next. Take it; later lines go into the next.
		lw.writing = true
		b, batch := lw.buf, lw.next
		lw.buf, lw.next = lw.spare[:0], lw.next+1
		lw.mu.Unlock()
		_, err := lw.w.Write(b)
		lw.mu.Lock()
		lw.spare, lw.writing, lw.done = b, false, batch+1
		if err != nil && lw.err == nil {
			lw.err = err
		}
		lw.written.Broadcast()
	}
	return lw.err
}
