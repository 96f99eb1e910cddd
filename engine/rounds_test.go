package engine

import (
	"testing"

	"github.com/sluicehq/sluice/engine/clock"
)

func TestRoundsTakeTheLeastOfTheLastCompleteRounds(t *testing.T) {
	r := newRounds(3, 2)
	// The first node's first reading is far ahead of the others (its
	// source has handed everything on); it must never become the
	// minimum on its own.
	add(r, []int64{600, 10, 20})
	if got := r.min(); got != clock.Start {
		t.Fatalf("after one of two rounds the minimum is %d, want Start", got)
	}
	add(r, []int64{600, 30, 40})
	if got := r.min(); got != 10 {
		t.Fatalf("minimum %d, want 10 (the least of both rounds)", got)
	}
	add(r, []int64{600, 300, 500})
	if got := r.min(); got != 30 {
		t.Fatalf("minimum %d, want 30 (the older round still counts)", got)
	}
	add(r, []int64{5, 300, 500}) // lower than published: never goes back
	if got := r.min(); got != 30 {
		t.Fatalf("minimum %d, want 30 (monotone)", got)
	}
	add(r, []int64{700, 800, 900})
	add(r, []int64{clock.Idle, clock.Idle, clock.Idle})
	if got := r.min(); got != 700 {
		t.Fatalf("minimum %d, want 700", got)
	}
	add(r, []int64{clock.Idle, clock.Idle, clock.Idle})
	if got := r.min(); got != clock.Idle {
		t.Fatalf("minimum %d, want Idle once every reading of the window is idle", got)
	}
}

func TestRoundsOfOneNodeAndOneRound(t *testing.T) {
	r := newRounds(1, 1)
	add(r, []int64{42})
	if got := r.min(); got != 42 {
		t.Fatalf("minimum %d, want 42", got)
	}
}

// add records one complete round: the minimum of each node, by node.
func add(r *rounds, mins []int64) {
	for i, m := range mins {
		r.report(i, m)
	}
	r.endRound()
}
