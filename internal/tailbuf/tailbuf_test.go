package tailbuf

import "testing"

func TestBuffer_KeepsTheEnd(t *testing.T) {
	b := &Buffer{Max: 5}
	for _, s := range []string{"abc", "defg", "h"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := b.String(); got != "defgh" {
		t.Fatalf("kept %q, want %q", got, "defgh")
	}
}
