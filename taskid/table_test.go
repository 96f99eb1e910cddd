package taskid

import (
	"errors"
	"math"
	"testing"
)

func chanOf(src, dst uint32, epoch uint64) Channel {
	return Channel{Source: ID{Processor: 1, Index: src}, Target: ID{Processor: 2, Index: dst}, Epoch: epoch}
}

func TestAssignGivesSmallNumbersOncePerChannel(t *testing.T) {
	tb := NewTable(0)
	for i := range uint32(3) {
		num, isNew, err := tb.Assign(chanOf(i, 0, 1))
		if err != nil || !isNew || num != i {
			t.Fatalf("channel %d: Assign = %d, %v, %v; want %d, true, nil", i, num, isNew, err, i)
		}
	}
	num, isNew, err := tb.Assign(chanOf(1, 0, 1))
	if err != nil || isNew || num != 1 {
		t.Fatalf("assigning an open channel again = %d, %v, %v; want 1, false, nil", num, isNew, err)
	}
	if num, _, _ := tb.Assign(chanOf(1, 0, 2)); num != 3 {
		t.Fatalf("a new epoch of the same tasks is a new channel: got number %d, want 3", num)
	}
	if tb.Len() != 4 {
		t.Fatalf("Len = %d, want 4", tb.Len())
	}
	if ch, err := tb.Lookup(2); err != nil || ch != chanOf(2, 0, 1) {
		t.Fatalf("Lookup(2) = %v, %v", ch, err)
	}
	if n, ok := tb.Number(chanOf(2, 0, 1)); !ok || n != 2 {
		t.Fatalf("Number = %d, %v; want 2, true", n, ok)
	}
}

func TestRemovedNumbersAreReused(t *testing.T) {
	tb := NewTable(0)
	for i := range uint32(5) {
		tb.Assign(chanOf(i, 0, 1))
	}
	if err := tb.Remove(1); err != nil {
		t.Fatal(err)
	}
	if err := tb.Remove(3); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Lookup(1); !errors.Is(err, ErrUnknownChannel) {
		t.Fatalf("Lookup of a removed number: %v, want ErrUnknownChannel", err)
	}
	if _, ok := tb.Number(chanOf(1, 0, 1)); ok {
		t.Fatal("a removed channel still has a number")
	}
	got := map[uint32]bool{}
	for i := uint32(10); i < 12; i++ {
		num, isNew, err := tb.Assign(chanOf(i, 0, 1))
		if err != nil || !isNew {
			t.Fatal(err)
		}
		got[num] = true
	}
	if !got[1] || !got[3] {
		t.Fatalf("the two new channels got numbers %v, want the freed 1 and 3", got)
	}
	if num, _, _ := tb.Assign(chanOf(20, 0, 1)); num != 5 {
		t.Fatalf("with no freed number left, got %d, want 5", num)
	}
	if tb.Len() != 6 {
		t.Fatalf("Len = %d, want 6", tb.Len())
	}
}

func TestTableLimits(t *testing.T) {
	tb := NewTable(2)
	tb.Assign(chanOf(0, 0, 1))
	tb.Assign(chanOf(1, 0, 1))
	if _, _, err := tb.Assign(chanOf(2, 0, 1)); !errors.Is(err, ErrTooManyChannels) {
		t.Fatalf("a third channel over a limit of 2: %v, want ErrTooManyChannels", err)
	}
	if _, isNew, err := tb.Assign(chanOf(1, 0, 1)); err != nil || isNew {
		t.Fatalf("an open channel at the limit must still resolve: %v, %v", isNew, err)
	}
	tb.Remove(0)
	if _, _, err := tb.Assign(chanOf(2, 0, 1)); err != nil {
		t.Fatalf("after a Remove there is room again: %v", err)
	}

	rx := NewTable(1)
	if err := rx.Bind(0, chanOf(0, 0, 1)); err != nil {
		t.Fatal(err)
	}
	if err := rx.Bind(1, chanOf(1, 0, 1)); !errors.Is(err, ErrTooManyChannels) {
		t.Fatalf("binding over the limit: %v, want ErrTooManyChannels", err)
	}
}

func TestBindRecordsWhatThePeerOpened(t *testing.T) {
	rx := NewTable(0)
	if err := rx.Bind(5, chanOf(5, 1, 7)); err != nil {
		t.Fatal(err)
	}
	if ch, err := rx.Lookup(5); err != nil || ch != chanOf(5, 1, 7) {
		t.Fatalf("Lookup(5) = %v, %v", ch, err)
	}
	for _, n := range []uint32{0, 4, 6, math.MaxUint32} {
		if _, err := rx.Lookup(n); !errors.Is(err, ErrUnknownChannel) {
			t.Errorf("Lookup(%d) of a number never opened: %v, want ErrUnknownChannel", n, err)
		}
		if err := rx.Remove(n); !errors.Is(err, ErrUnknownChannel) {
			t.Errorf("Remove(%d) of a number never opened: %v, want ErrUnknownChannel", n, err)
		}
	}
	if err := rx.Bind(5, chanOf(9, 9, 9)); !errors.Is(err, ErrChannelInUse) {
		t.Fatalf("binding an open number again: %v, want ErrChannelInUse", err)
	}
	if err := rx.Bind(6, chanOf(5, 1, 7)); !errors.Is(err, ErrChannelInUse) {
		t.Fatalf("binding an open channel under a second number: %v, want ErrChannelInUse", err)
	}
	if err := rx.Remove(5); err != nil {
		t.Fatal(err)
	}
	if err := rx.Remove(5); !errors.Is(err, ErrUnknownChannel) {
		t.Fatalf("removing twice: %v, want ErrUnknownChannel", err)
	}
	if err := rx.Bind(6, chanOf(5, 1, 7)); err != nil {
		t.Fatalf("after a CLOSE the channel may be reopened under another number: %v", err)
	}
}

func TestBindRefusesAHostileHugeChannelNumber(t *testing.T) {
	rx := NewTable(0)
	for _, n := range []uint32{math.MaxUint32, 1 << 31, 1025} {
		if err := rx.Bind(n, chanOf(0, 0, 1)); !errors.Is(err, ErrChannelNumber) {
			t.Fatalf("Bind(%d) on an empty table: %v, want ErrChannelNumber", n, err)
		}
	}
	if len(rx.entries) != 0 {
		t.Fatalf("refused binds grew the table to %d entries", len(rx.entries))
	}
	if err := rx.Bind(1024, chanOf(0, 0, 1)); err != nil {
		t.Fatalf("a number within the slack of 1024 is fine: %v", err)
	}
	if rx.Len() != 1 {
		t.Fatalf("Len = %d, want 1", rx.Len())
	}
}

func TestABindOnlyTableStaysBoundedUnderOpenCloseChurn(t *testing.T) {
	rx := NewTable(0)
	for i := range 100000 {
		if err := rx.Bind(uint32(i%3), chanOf(uint32(i), 0, 1)); err != nil {
			t.Fatal(err)
		}
		if err := rx.Remove(uint32(i % 3)); err != nil {
			t.Fatal(err)
		}
	}
	if len(rx.free) > len(rx.entries) || len(rx.entries) > 3 || len(rx.byChan) != 0 {
		t.Fatalf("after 100000 open/close cycles: %d entries, %d free, %d channels", len(rx.entries), len(rx.free), len(rx.byChan))
	}
}

func TestAssignSkipsFreedNumbersThatWereBoundAgain(t *testing.T) {
	tb := NewTable(0)
	tb.Assign(chanOf(0, 0, 1))
	tb.Assign(chanOf(1, 0, 1))
	tb.Remove(0)
	if err := tb.Bind(0, chanOf(7, 7, 7)); err != nil {
		t.Fatal(err)
	}
	num, _, err := tb.Assign(chanOf(2, 0, 1))
	if err != nil || num == 0 || num == 1 {
		t.Fatalf("Assign = %d, %v; want a number not in use", num, err)
	}
	if ch, _ := tb.Lookup(0); ch != chanOf(7, 7, 7) {
		t.Fatalf("Assign overwrote the bound number 0 with %v", ch)
	}
}

func TestChannelString(t *testing.T) {
	if s := chanOf(0, 3, 4).String(); s != "1.0->2.3@4" {
		t.Fatalf("String() = %q", s)
	}
}

func TestARetiredNumberIsNotReusedUntilRemoved(t *testing.T) {
	tb := NewTable(0)
	a := Channel{Source: ID{Index: 1}, Target: ID{Index: 2}, Epoch: 1}
	b := Channel{Source: ID{Index: 3}, Target: ID{Index: 4}, Epoch: 1}
	na, _, _ := tb.Assign(a)
	if err := tb.Retire(na); err != nil {
		t.Fatal(err)
	}
	if !tb.Retired(na) {
		t.Fatal("not retired")
	}
	if _, err := tb.Lookup(na); err == nil {
		t.Error("a retired number still looks up")
	}
	if err := tb.Retire(na); err == nil {
		t.Error("retired twice")
	}
	nb, _, _ := tb.Assign(b)
	if nb == na {
		t.Fatalf("number %d reused while retired", na)
	}
	na2, isNew, _ := tb.Assign(a)
	if na2 == na || !isNew {
		t.Fatalf("the retired channel got %d (new %v), want a new number", na2, isNew)
	}
	if err := tb.Remove(na); err != nil {
		t.Fatal(err)
	}
	if tb.Retired(na) {
		t.Error("still retired after Remove")
	}
	if got, ok := tb.Number(a); !ok || got != na2 {
		t.Errorf("Remove of the retired number dropped the channel's new number: %d %v", got, ok)
	}
	c := Channel{Source: ID{Index: 5}, Target: ID{Index: 6}, Epoch: 1}
	if nc, _, _ := tb.Assign(c); nc != na {
		t.Errorf("the freed number %d was not reused (got %d)", na, nc)
	}
}
