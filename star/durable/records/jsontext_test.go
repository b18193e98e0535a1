package records

import "testing"

// JSON mode keeps what was sent: a body that is not UTF-8, or escapes a
// lone surrogate, is refused (it would be stored as invalid JSON, or read
// back with U+FFFD), while paired surrogates and plain text pass.
func TestJSONMessagesRefuseInexactText(t *testing.T) {
	for _, body := range []string{"{\"a\":\"\xff\"}", "[\"ok\",\"\xc3\"]", `{"a":"\ud800"}`, `["\udc00"]`} {
		if _, err := JSONMessages([]byte(body), false); err == nil {
			t.Errorf("%q accepted", body)
		}
	}
	for _, body := range []string{`{"a":"\ud83d\ude00"}`, `["é", 1]`, `"x"`} {
		if _, err := JSONMessages([]byte(body), false); err != nil {
			t.Errorf("%q refused: %v", body, err)
		}
	}
}
