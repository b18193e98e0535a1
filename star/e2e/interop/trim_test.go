package interop_test

import "testing"

// TestS2TypeScriptSDKTrim runs trim.mjs against a star dev with default
// timers: after the SDK's trim(4), reads from below it (unary, and a
// readSession on both transports) start at 4 within a second of the
// trim's ack, long before anything settles (issue 29 item 2).
func TestS2TypeScriptSDKTrim(t *testing.T) {
	t.Parallel()
	runSDKScript(t, "trim.mjs", 2)
}

// TestS2TypeScriptSDKCreateOnRead runs createonread.mjs: a read (a session
// and a unary read, on both transports) of a missing stream in a basin
// that creates streams on read, with the SDK's streamConfig, creates the
// stream with that config though the read is 416 (issue 29 item 3).
func TestS2TypeScriptSDKCreateOnRead(t *testing.T) {
	t.Parallel()
	runSDKScript(t, "createonread.mjs", 2)
}
