package event

import (
	"strings"
	"testing"
	"time"
)

func TestDecode(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	good := Event{OrderID: "order-1", Seq: 2, Kind: Paid, AmountCents: 1250, At: at}
	got, err := Decode(good.Encode())
	if err != nil || got != good {
		t.Fatalf("Decode(Encode(%+v)) = %+v, %v", good, got, err)
	}
	for _, tc := range []struct{ value, want string }{
		{`not json`, "event: invalid character"},
		{`{"seq":1,"kind":"placed"}`, "no order id"},
		{`{"order_id":"o","seq":0,"kind":"placed"}`, "no order id or sequence number"},
		{`{"order_id":"o","seq":1,"kind":"refunded"}`, "unknown kind"},
	} {
		if _, err := Decode([]byte(tc.value)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Decode(%s) = %v; want an error containing %q", tc.value, err, tc.want)
		}
	}
}

func TestAmounts(t *testing.T) {
	for _, tc := range []struct {
		e              Event
		revenue, total int64
	}{
		{Event{Kind: Placed, AmountCents: 900}, 0, 900},
		{Event{Kind: Paid, AmountCents: 900}, 900, 0},
		{Event{Kind: Shipped}, 0, 0},
		{Event{Kind: Cancelled}, 0, 0},
		{Event{Kind: Cancelled, AmountCents: 900}, -900, 0},
	} {
		if r, tot := tc.e.Revenue(), tc.e.Total(); r != tc.revenue || tot != tc.total {
			t.Errorf("%+v: revenue %d total %d; want %d, %d", tc.e, r, tot, tc.revenue, tc.total)
		}
	}
	for cents, want := range map[int64]string{0: "$0.00", 5: "$0.05", 123456789: "$1,234,567.89", 100000: "$1,000.00", -2550: "-$25.50"} {
		if got := Dollars(cents); got != want {
			t.Errorf("Dollars(%d) = %s, want %s", cents, got, want)
		}
	}
}
