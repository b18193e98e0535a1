package functions_test

import (
	"testing"
	"time"

	"github.com/starlog/starlog/functions/internal/testenv"
)

// The functions' state has exactly the halts its set-up makes (writeState:
// one, so two epochs), so a PUT a loaded machine makes slow must not halt
// the epoch too. With a 300 ms flight deadline a clean-clone run's
// TestFunctionsUnderRIE once found three epochs ("want a halted epoch 1
// below epoch 2"); PUTs 500 ms slow in two of the three zones here stand
// for that machine.
func TestSlowPutsDoNotHaltTheEnv(t *testing.T) {
	if testing.Short() {
		t.Skip("starts versitygw and DynamoDB Local")
	}
	e := testenv.New(t, &dyn)
	before := e.Loglet.Epoch()
	e.Objects.SetSlow(testenv.Zones[1], 500*time.Millisecond)
	e.Objects.SetSlow(testenv.Zones[2], 500*time.Millisecond)
	e.Write("a", 3, 2, 500)
	e.Objects.SetSlow(testenv.Zones[1], 0)
	e.Objects.SetSlow(testenv.Zones[2], 0)
	if got := e.Loglet.Epoch(); got != before {
		t.Fatalf("slow PUTs halted epoch %d (now %d): the env's flight deadline is below a loaded machine's PUT", before, got)
	}
	if eps := e.Epochs(); len(eps) != 1 {
		t.Fatalf("slow PUTs left %d epochs, want 1: %+v", len(eps), eps)
	}
}
