package wire

import (
	"bytes"
	"strconv"
	"time"
)

// The plain form of an ownership record.
//
// Every claim, release, renewal and watch event encodes or decodes one
// record, and encoding/json cost about a tenth of a worker's CPU in the
// zipf bench (every worker decodes every claim of the world in its watch).
// The plain form is exactly the bytes json.Marshal makes of a Record whose
// node is printable ASCII without the characters it escapes:
//
//	{"v":1,"node":"n1","epoch":7,"state":"held","ttl_ms":10000,"acquired":"...","expires":"..."[,"node_lease":3]}
//
// appendPlainRecord writes it and decodePlainRecord reads it without
// reflection. Anything else (another order of keys, white space, escapes,
// another version, a node beyond ASCII) goes through encoding/json as
// before; FuzzPlainRecord checks that both ways give the same bytes and the
// same record wherever the plain way answers.

// plainString says whether s is written by json.Marshal as itself between
// quotes: printable ASCII but for the quote, the backslash, and the HTML
// characters it escapes.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// appendPlainRecord appends r's JSON form as json.Marshal writes it, or
// says it cannot (a node plainString refuses, a time outside years
// 0..9999). r.V is written as RecordVersion.
func appendPlainRecord(b []byte, r *Record) ([]byte, bool) {
	if !plainString(r.Node) || !plainString(r.State) {
		return b, false
	}
	var err error
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, RecordVersion, 10)
	b = append(b, `,"node":"`...)
	b = append(b, r.Node...)
	b = append(b, `","epoch":`...)
	b = strconv.AppendUint(b, r.Epoch, 10)
	b = append(b, `,"state":"`...)
	b = append(b, r.State...)
	b = append(b, `","ttl_ms":`...)
	b = strconv.AppendInt(b, r.TTLms, 10)
	b = append(b, `,"acquired":"`...)
	if b, err = r.Acquired.AppendText(b); err != nil {
		return b, false
	}
	b = append(b, `","expires":"`...)
	if b, err = r.Expires.AppendText(b); err != nil {
		return b, false
	}
	b = append(b, '"')
	if r.NodeLease != 0 {
		b = append(b, `,"node_lease":`...)
		b = strconv.AppendUint(b, r.NodeLease, 10)
	}
	return append(b, '}'), true
}

// decodePlainRecord reads a record in the plain form, or says data is not
// in it (then encoding/json decides, and may still accept it). It does not
// validate the record.
func decodePlainRecord(data []byte) (Record, bool) {
	p := plainReader{rest: data, ok: true}
	var r Record
	p.lit(`{"v":1,"node":"`)
	r.Node = p.str()
	p.lit(`,"epoch":`)
	r.Epoch = p.uint()
	p.lit(`,"state":"`)
	switch st := p.raw(); string(st) { // the states without an allocation
	case StateHeld:
		r.State = StateHeld
	case StateFree:
		r.State = StateFree
	default:
		r.State = string(st)
	}
	p.lit(`,"ttl_ms":`)
	ttl := p.uint()
	p.lit(`,"acquired":"`)
	r.Acquired = p.time()
	p.lit(`,"expires":"`)
	r.Expires = p.time()
	if bytes.HasPrefix(p.rest, []byte(`,"node_lease":`)) {
		p.lit(`,"node_lease":`)
		r.NodeLease = p.uint()
	}
	p.lit(`}`)
	if !p.ok || len(p.rest) != 0 || ttl > 1<<63-1 {
		return Record{}, false
	}
	r.V, r.TTLms = RecordVersion, int64(ttl)
	return r, true
}

// plainReader reads the plain form left to right; the first thing that is
// not as expected clears ok, and every read after that returns zero.
type plainReader struct {
	rest []byte
	ok   bool
}

// lit reads s.
func (p *plainReader) lit(s string) {
	if !p.ok || !bytes.HasPrefix(p.rest, []byte(s)) {
		p.ok = false
		return
	}
	p.rest = p.rest[len(s):]
}

// raw reads the bytes up to the next quote, which it reads too: printable
// ASCII without a backslash (a JSON string that decodes to itself).
func (p *plainReader) raw() []byte {
	if !p.ok {
		return nil
	}
	for i, c := range p.rest {
		switch {
		case c == '"':
			s := p.rest[:i]
			p.rest = p.rest[i+1:]
			return s
		case c < 0x20 || c > 0x7e || c == '\\':
			p.ok = false
			return nil
		}
	}
	p.ok = false
	return nil
}

// str reads a string's bytes and its closing quote.
func (p *plainReader) str() string { return string(p.raw()) }

// time reads a time as encoding/json does (time.Time.UnmarshalJSON's
// parser) and its closing quote.
func (p *plainReader) time() time.Time {
	s := p.raw()
	if !p.ok {
		return time.Time{}
	}
	var t time.Time
	if err := t.UnmarshalText(s); err != nil {
		p.ok = false
	}
	return t
}

// uint reads a number in canonical decimal (no sign, no leading zero, no
// fraction or exponent) that fits in a uint64.
func (p *plainReader) uint() uint64 {
	if !p.ok {
		return 0
	}
	n, i := uint64(0), 0
	for ; i < len(p.rest) && p.rest[i] >= '0' && p.rest[i] <= '9'; i++ {
		d := uint64(p.rest[i] - '0')
		if n > (1<<64-1-d)/10 {
			p.ok = false
			return 0
		}
		n = n*10 + d
	}
	if i == 0 || i > 1 && p.rest[0] == '0' {
		p.ok = false
		return 0
	}
	p.rest = p.rest[i:]
	return n
}
