package wire

// DecodeCursorStrict is DecodeCursor without its fast path for the plain
// form, for the fuzz test that compares the two.
var DecodeCursorStrict = decodeCursorStrict
