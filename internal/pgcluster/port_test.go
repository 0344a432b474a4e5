package pgcluster

import (
	"errors"
	"testing"
)

// A cluster never takes a port its caller is about to listen on (inlet dev's
// own listeners, free until the database is up): not as the port it prefers,
// not as one it draws. Before AvoidPorts, inlet dev's PostgreSQL once took
// the port its admin API was then refused ("address already in use").
func TestPickPortAvoids(t *testing.T) {
	free := func(int) bool { return true }
	draws := func(ports ...int) func() (int, error) {
		return func() (int, error) {
			if len(ports) == 0 {
				return 0, errors.New("no more ports")
			}
			p := ports[0]
			ports = ports[1:]
			return p, nil
		}
	}
	for _, tc := range []struct {
		name   string
		prefer int
		avoid  []int
		draws  []int
		want   int
	}{
		{name: "the preferred port", prefer: 25000, avoid: []int{25001}, draws: []int{26000}, want: 25000},
		{name: "the preferred port avoided", prefer: 25000, avoid: []int{25000}, draws: []int{26000}, want: 26000},
		{name: "drawn ports avoided", avoid: []int{26000, 26001}, draws: []int{26000, 26001, 26002}, want: 26002},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pickPort(tc.prefer, tc.avoid, free, draws(tc.draws...))
			if err != nil || got != tc.want {
				t.Fatalf("pickPort = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
	if _, err := pickPort(25000, nil, func(int) bool { return false }, draws()); err == nil {
		t.Fatal("pickPort with nothing free: want an error")
	}
}
