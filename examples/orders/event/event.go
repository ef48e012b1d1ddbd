// Package event is the orders story's event: what the shop publishes to
// the orders topic, keyed by order id, and what billing and analytics
// read back.
//
// An order's events carry its sequence numbers 1, 2, 3... in the order
// the shop published them, each published only once the one before was
// acknowledged. The lifecycle is placed, then paid or cancelled, then
// (after paid) shipped or cancelled with a refund.
package event

import (
	"encoding/json"
	"fmt"
	"time"
)

// Kind is what happened to an order.
type Kind string

// The kinds of events, in the order an order goes through them.
const (
	Placed    Kind = "placed"    // the order exists; AmountCents is its total
	Paid      Kind = "paid"      // the customer paid AmountCents
	Shipped   Kind = "shipped"   // the goods left; AmountCents is 0
	Cancelled Kind = "cancelled" // the order ended; AmountCents is the refund (0 before payment)
)

// Event is one record's value, as JSON.
type Event struct {
	OrderID     string    `json:"order_id"`
	Seq         int       `json:"seq"` // 1 for placed, then one more per event of the order
	Kind        Kind      `json:"kind"`
	AmountCents int64     `json:"amount_cents"`
	At          time.Time `json:"at"`
}

// Decode parses a record value.
func Decode(b []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(b, &e); err != nil {
		return e, fmt.Errorf("event: %w", err)
	}
	if e.OrderID == "" || e.Seq < 1 {
		return e, fmt.Errorf("event: %q: no order id or sequence number", b)
	}
	switch e.Kind {
	case Placed, Paid, Shipped, Cancelled:
	default:
		return e, fmt.Errorf("event: %q: unknown kind", b)
	}
	return e, nil
}

// Encode is the record value of e.
func (e Event) Encode() []byte {
	b, _ := json.Marshal(e) // a struct of plain fields always marshals
	return b
}

// Revenue is what the event adds to the shop's revenue, in cents: a
// payment adds its amount, a refund takes it back.
func (e Event) Revenue() int64 {
	switch e.Kind {
	case Paid:
		return e.AmountCents
	case Cancelled:
		return -e.AmountCents
	}
	return 0
}

// Total is what the event adds to the order's invoiced total: the amount
// of the order when it is placed.
func (e Event) Total() int64 {
	if e.Kind == Placed {
		return e.AmountCents
	}
	return 0
}

// Dollars formats cents as $1,234.56.
func Dollars(cents int64) string {
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	whole := fmt.Sprint(cents / 100)
	for i := len(whole) - 3; i > 0; i -= 3 {
		whole = whole[:i] + "," + whole[i:]
	}
	return fmt.Sprintf("%s$%s.%02d", sign, whole, cents%100)
}
