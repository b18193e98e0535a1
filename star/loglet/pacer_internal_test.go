package loglet

import (
	"testing"
	"time"
)

func TestPacerChargesWritesAtTheBudget(t *testing.T) {
	p := NewPacer(50)
	t0 := time.Unix(1000, 0)
	if !p.Due().IsZero() {
		t.Fatal("a fresh pacer owes nothing")
	}
	p.Charge(t0, 102) // a pass of 100 streams
	if got, want := p.Due(), t0.Add(2040*time.Millisecond); !got.Equal(want) {
		t.Fatalf("due %v, want %v", got.Sub(t0), want.Sub(t0))
	}
	// Debts add up while they are unpaid …
	p.Charge(t0.Add(time.Second), 50)
	if got, want := p.Due(), t0.Add(3040*time.Millisecond); !got.Equal(want) {
		t.Fatalf("due %v, want %v", got.Sub(t0), want.Sub(t0))
	}
	// … and an idle spell earns no credit.
	later := t0.Add(time.Hour)
	p.Charge(later, 5)
	if got, want := p.Due(), later.Add(100*time.Millisecond); !got.Equal(want) {
		t.Fatalf("due %v after idling, want %v", got.Sub(later), want.Sub(later))
	}
	if NewPacer(0) != nil || NewPacer(-1).Due() != (time.Time{}) {
		t.Fatal("a budget of 0 is no pacer")
	}
}

func TestNextPassSpacing(t *testing.T) {
	last := time.Unix(2000, 0)
	min := 100 * time.Millisecond
	cases := []struct {
		due       time.Time
		pressured bool
		want      time.Time
	}{
		{time.Time{}, false, last.Add(min)},                           // no budget: the minimum interval
		{last.Add(50 * time.Millisecond), false, last.Add(min)},       // paid before the minimum
		{last.Add(5 * time.Second), false, last.Add(5 * time.Second)}, // the budget spaces it
		{last.Add(5 * time.Second), true, last.Add(min)},              // the backlog may not wait
	}
	for i, c := range cases {
		if got := nextPass(last, c.due, min, c.pressured); !got.Equal(c.want) {
			t.Errorf("case %d: next pass at %v, want %v", i, got.Sub(last), c.want.Sub(last))
		}
	}
}

func TestPassWrites(t *testing.T) {
	for _, c := range []struct{ streams, want int }{{1, 4}, {29, 60}, {100, 203}, {1000, 2004}, {20000, 40024}} {
		if got := passWrites(c.streams); got != c.want {
			t.Errorf("passWrites(%d) = %d, want %d", c.streams, got, c.want)
		}
	}
}
